//! A capacity shared among the subscribers by demand (the notifier's side of
//! [`crate::event::allocator`]): which share each subscription is sent, so that what the
//! subscribers may be enforcing never adds up to more than the capacity.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Notifier, Subscription, uri_key};
use crate::event::allocator::{
    Allocation, AllocatorConfig, AllocatorError, ShareReport, round_share,
};
use crate::policy::{Rule, Uri};

impl Notifier {
    /// Marks every subscription whose policy the allocation writes as having something to
    /// send (a NOTIFY goes out only if its share actually changed).
    pub(super) fn mark_allocated_dirty(&mut self) {
        let Some(a) = &self.allocation else {
            return;
        };
        for s in &mut self.subs {
            if a.contains(&s.key) && !self.per_subscriber.contains_key(&s.key) {
                s.dirty = true;
            }
        }
    }

    /// What each subscriber (key) may be enforcing under the allocation: the largest share
    /// any of its subscriptions acknowledged or has in flight, or an orphaned one.
    fn exposures(&self) -> HashMap<&str, f64> {
        let mut exposure: HashMap<&str, f64> = HashMap::new();
        let subs = self.subs.iter().map(|s| (s.key.as_str(), exposure_of(s)));
        let orphans = self.orphans.iter().map(|o| (o.key.as_str(), o.share));
        for (k, e) in subs.chain(orphans) {
            let x = exposure.entry(k).or_insert(e);
            *x = x.max(e);
        }
        exposure
    }

    /// The share subscription `i` is to be sent under the allocation, and its rules: the
    /// target when it is no more than what the subscriber may already be enforcing (a
    /// decrease never adds exposure); above that, no more than the capacity minus what every
    /// other subscriber may be enforcing (acknowledged, in flight or orphaned), and never less
    /// than what it already has. `None` when the allocation does not write its policy.
    pub(super) fn allocated(&self, i: usize) -> Option<(f64, Vec<Arc<Rule>>)> {
        let a = self.allocation.as_ref()?;
        let key = &self.subs[i].key;
        if self.per_subscriber.contains_key(key) {
            return None;
        }
        let target = a.target(key)?;
        let exposure = self.exposures();
        let own = exposure.get(key.as_str()).copied().unwrap_or(0.0);
        let others: f64 = exposure
            .iter()
            .filter(|(k, _)| **k != key.as_str())
            .map(|(_, e)| e)
            .sum();
        let share = if target <= own {
            target
        } else {
            target.min(own.max(a.capacity() - others))
        };
        let share = round_share(share.max(0.0));
        Some((share, a.rules(share)))
    }

    /// Shares `capacity` requests/s of the requests `template` matches among the subscribers
    /// by demand (see [`crate::event::allocator`]): each gets `template` with its share as `<rate>`,
    /// unless [`Notifier::set_subscriber_policy`] gave it a policy of its own (that one wins;
    /// the allocation comes before [`Notifier::set_policy`]'s). Demand comes from
    /// [`Notifier::observe`]. Calling it again with a template of the same class (id,
    /// conditions, alt-action; its limit is ignored) and the same configuration only changes
    /// the capacity (measurements kept). Nothing changes on an error.
    pub fn set_capacity(
        &mut self,
        now_ns: u64,
        capacity: f64,
        template: Rule,
        config: AllocatorConfig,
    ) -> Result<(), AllocatorError> {
        match &mut self.allocation {
            Some(a) if same_class(a.template(), &template) && *a.config() == config => {
                a.set_capacity(capacity)?;
            }
            _ => {
                let mut a = Allocation::new(capacity, template, config, now_ns)?;
                for s in self.subs.iter().filter(|s| s.ending.is_none()) {
                    a.join(&s.key, s.subscriber.uri.as_str(), now_ns);
                }
                self.allocation = Some(a);
            }
        }
        self.mark_allocated_dirty();
        self.flush(now_ns);
        Ok(())
    }

    /// Stops sharing a capacity: subscribers get [`Notifier::set_policy`]'s policy again.
    pub fn clear_capacity(&mut self, now_ns: u64) {
        if self.allocation.take().is_none() {
            return;
        }
        // What subscribers may still enforce stays counted (if a capacity comes back).
        for s in &mut self.subs {
            if !self.per_subscriber.contains_key(&s.key) {
                s.dirty = true;
            }
        }
        self.flush(now_ns);
    }

    /// Counts `count` requests of the allocated class that arrived from `subscriber` (what it
    /// admitted) since its previous observation, the last at `now_ns` (see
    /// [`Allocation::observe`]). False when no capacity is shared or the subscriber has no
    /// subscription.
    pub fn observe(&mut self, now_ns: u64, subscriber: &Uri, count: u64) -> bool {
        let key = uri_key(subscriber);
        self.allocation
            .as_mut()
            .is_some_and(|a| a.observe(&key, count, now_ns))
    }

    /// Each subscriber's measured demand and shares (empty when no capacity is shared).
    pub fn shares(&self) -> Vec<ShareReport> {
        self.allocation
            .as_ref()
            .map(Allocation::reports)
            .unwrap_or_default()
    }
}

/// What a subscription's subscriber may be enforcing under an allocation: the larger of the
/// share it acknowledged and the one in flight.
pub(super) fn exposure_of(s: &Subscription) -> f64 {
    s.in_force_share
        .unwrap_or(0.0)
        .max(s.outstanding_share.unwrap_or(0.0))
}

/// True when two template rules name the same class of requests (the same id, conditions and
/// alt-action; their limits may differ: the capacity is given separately).
fn same_class(a: &Rule, b: &Rule) -> bool {
    a.id == b.id && a.conditions == b.conditions && a.accept.alt_action == b.accept.alt_action
}
