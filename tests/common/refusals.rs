//! The shared refusal table, `tests/callers/refusals.txt`, parsed once for every caller's test
//! (the C ABI and kernel layer in `tests/hostile.rs`, the typed Rust API in `tests/callers.rs`;
//! Python parses the same file in `python/tests/test_callers.py`).

/// One row: the entry (by its Python name), the edit (`name = value` or `name[i] = value`) and
/// the words the message must contain.
pub struct Refusal {
    pub entry: String,
    pub name: String,
    pub index: Option<usize>,
    pub value: String,
    pub says: String,
}

/// Every row of the table.
pub fn table() -> Vec<Refusal> {
    let rows: Vec<Refusal> = include_str!("../callers/refusals.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('|').map(str::trim).collect();
            assert_eq!(f.len(), 3, "bad table line: {l}");
            let (lhs, value) = f[1].split_once('=').expect("an edit is name = value");
            let lhs = lhs.trim();
            let (name, index) = match lhs.split_once('[') {
                Some((n, i)) => (n, Some(i.trim_end_matches(']').parse().expect("an index"))),
                None => (lhs, None),
            };
            Refusal {
                entry: f[0].into(),
                name: name.into(),
                index,
                value: value.trim().into(),
                says: f[2].into(),
            }
        })
        .collect();
    assert!(rows.len() >= 20, "the table lost rows");
    rows
}
