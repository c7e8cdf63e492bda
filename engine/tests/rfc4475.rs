#[test]
fn dump() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/rfc4475");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    for p in names {
        let b = std::fs::read(&p).unwrap();
        let r = loadctl::sip::scan(&b);
        println!(
            "{}: {:?}",
            p.file_name().unwrap().to_string_lossy(),
            r.map(|r| (
                r.method,
                r.request_uri,
                String::from_utf8_lossy(r.from).into_owned(),
                String::from_utf8_lossy(r.to).into_owned()
            ))
        );
    }
}
