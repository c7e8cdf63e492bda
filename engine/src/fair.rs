//! Max-min fair sharing of a capacity among demands (water-filling), the one split both the
//! event package's allocator (a notifier's R among its subscribers) and the RFC 7339 server
//! (a target rate among its clients) use.

/// Max-min fair shares of `capacity` for `demands` (same order), adding up to `capacity`:
/// water-filling, then what nobody demanded spread equally.
pub fn max_min_fair(capacity: f64, demands: &[f64]) -> Vec<f64> {
    let (mut shares, remaining) = water_fill(capacity, demands);
    let n = shares.len().max(1);
    for s in &mut shares {
        *s += remaining / n as f64;
    }
    shares
}

/// Water-filling: every demand below an equal split of what is left is met, the rest split
/// what remains equally. Returns the shares (same order) and what nobody demanded.
pub fn water_fill(capacity: f64, demands: &[f64]) -> (Vec<f64>, f64) {
    let n = demands.len();
    let capacity = capacity.max(0.0);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| demands[a].total_cmp(&demands[b]));
    let mut shares = vec![0.0; n];
    let mut remaining = capacity;
    for (k, &i) in order.iter().enumerate() {
        let fair = remaining / (n - k) as f64;
        let give = demands[i].max(0.0).min(fair);
        shares[i] = give;
        remaining -= give;
    }
    (shares, remaining.max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
    }

    #[test]
    fn water_filling() {
        // Everyone over the fair share: equal split.
        assert!(close(
            &max_min_fair(300.0, &[500.0, 400.0, 1000.0]),
            &[100.0, 100.0, 100.0]
        ));
        // A small demand keeps its demand, the rest is redistributed.
        assert!(close(
            &max_min_fair(300.0, &[20.0, 400.0, 1000.0]),
            &[20.0, 140.0, 140.0]
        ));
        // Demand below capacity: everyone gets its demand plus equal headroom.
        assert!(close(
            &max_min_fair(300.0, &[20.0, 40.0, 60.0]),
            &[80.0, 100.0, 120.0]
        ));
        assert!(max_min_fair(10.0, &[]).is_empty());
        for d in [[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [1e9, 5.0, 7.0]] {
            let s: f64 = max_min_fair(123.0, &d).iter().sum();
            assert!((s - 123.0).abs() < 1e-6);
        }
    }
}
