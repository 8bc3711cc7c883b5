//! The `shardSelector` grammar as kube-apiserver v1.36 accepts and refuses it, and the written
//! form read back.

use informer_shard::{
    Bound, HASH_SPACE_END, ParseError, ShardField, ShardRange, ShardSelector, hash,
};
use proptest::prelude::*;

const LOW: &str = "'0x0000000000000000'";
const MID: &str = "'0x8000000000000000'";
const TOP: &str = "'0x10000000000000000'";

fn parse(s: &str) -> Result<ShardSelector, ParseError> {
    s.parse()
}

#[test]
fn accepted_forms() {
    let half = ShardRange::new(0, 1 << 63).unwrap();
    let upper = ShardRange::from_start(1 << 63);
    let cases: [(String, ShardField, Vec<ShardRange>); 7] = [
        (
            format!("shardRange(object.metadata.uid, {LOW}, {MID})"),
            ShardField::Uid,
            vec![half],
        ),
        (
            format!("shardRange(object.metadata.uid,{LOW},{TOP})"),
            ShardField::Uid,
            vec![ShardRange::FULL],
        ),
        (
            format!("\t shardRange ( object . metadata . namespace ,\n{LOW} , {MID} )  "),
            ShardField::Namespace,
            vec![half],
        ),
        (
            format!(
                "shardRange(object.metadata.uid, {LOW}, {MID}) || shardRange(object.metadata.uid, {MID}, {TOP})"
            ),
            ShardField::Uid,
            vec![half, upper],
        ),
        (
            // Double quotes are CEL strings too; parentheses group.
            format!(
                "(shardRange(object.metadata.uid, \"0x8000000000000000\", {TOP}) || (shardRange(object.metadata.uid, {LOW}, {MID})))"
            ),
            ShardField::Uid,
            vec![upper, half],
        ),
        (
            // Overlapping ranges are allowed.
            format!(
                "shardRange(object.metadata.uid, {LOW}, {TOP})||shardRange(object.metadata.uid, {MID}, {TOP})"
            ),
            ShardField::Uid,
            vec![ShardRange::FULL, upper],
        ),
        (
            "shardRange(object.metadata.uid, '0xffffffffffffffff', '0x10000000000000000')".into(),
            ShardField::Uid,
            vec![ShardRange::new(u64::MAX, HASH_SPACE_END).unwrap()],
        ),
    ];
    for (text, field, ranges) in cases {
        let parsed = parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(parsed.field(), field, "{text}");
        assert_eq!(parsed.ranges(), &ranges[..], "{text}");
    }
}

#[test]
fn refused_forms_say_why() {
    let uid = |start: &str, end: &str| format!("shardRange(object.metadata.uid, {start}, {end})");
    let cases: Vec<(String, ParseError)> = vec![
        ("  \t".into(), ParseError::Blank),
        (
            uid("'0000000000000000'", MID),
            ParseError::MissingPrefix {
                bound: Bound::Start,
                literal: "0000000000000000".into(),
            },
        ),
        (
            uid(LOW, "'0X8000000000000000'"),
            ParseError::MissingPrefix {
                bound: Bound::End,
                literal: "0X8000000000000000".into(),
            },
        ),
        (
            uid("'0x'", MID),
            ParseError::NoDigits {
                bound: Bound::Start,
            },
        ),
        (
            uid(LOW, "'0x800000000000000G'"),
            ParseError::NotHex {
                bound: Bound::End,
                literal: "0x800000000000000G".into(),
                ch: 'G',
            },
        ),
        (
            uid(LOW, "'0x8000000000000ABC'"),
            ParseError::NotHex {
                bound: Bound::End,
                literal: "0x8000000000000ABC".into(),
                ch: 'A',
            },
        ),
        (
            uid("'0x0'", MID),
            ParseError::DigitCount {
                bound: Bound::Start,
                literal: "0x0".into(),
                suggestion: Some("0x0000000000000000".into()),
            },
        ),
        (
            uid(LOW, "'0x000000000000000000'"),
            ParseError::DigitCount {
                bound: Bound::End,
                literal: "0x000000000000000000".into(),
                suggestion: None,
            },
        ),
        (
            uid(LOW, "'0x20000000000000000'"),
            ParseError::BeyondHashSpace {
                bound: Bound::End,
                literal: "0x20000000000000000".into(),
            },
        ),
        (
            uid(MID, MID),
            ParseError::EmptyRange {
                start: "0x8000000000000000".into(),
                end: "0x8000000000000000".into(),
            },
        ),
        (
            uid(TOP, TOP),
            ParseError::EmptyRange {
                start: "0x10000000000000000".into(),
                end: "0x10000000000000000".into(),
            },
        ),
        (
            uid("0", "8"),
            ParseError::NotAString {
                bound: Bound::Start,
            },
        ),
        (
            uid("hex(0)", MID),
            ParseError::NotAString {
                bound: Bound::Start,
            },
        ),
        (
            format!("shardRange(object.metadata.name, {LOW}, {MID})"),
            ParseError::UnsupportedField {
                path: "object.metadata.name".into(),
            },
        ),
        (
            format!("shardRange(metadata.uid, {LOW}, {MID})"),
            ParseError::UnsupportedField {
                path: "metadata.uid".into(),
            },
        ),
        (
            format!("shardRange({LOW}, {LOW}, {MID})"),
            ParseError::NotAFieldPath,
        ),
        (
            format!("shardRange(object.metadata.uid, {LOW})"),
            ParseError::ArgumentCount { count: 2 },
        ),
        (
            format!("fnvRange(object.metadata.uid, {LOW}, {MID})"),
            ParseError::UnsupportedFunction {
                name: "fnvRange".into(),
            },
        ),
        (
            format!(
                "{} || shardRange(object.metadata.namespace, {MID}, {TOP})",
                uid(LOW, MID)
            ),
            ParseError::MixedFields {
                first: ShardField::Uid,
                other: ShardField::Namespace,
            },
        ),
        (
            format!("shardRange(object.metadata.uid, '0x0000000000000000, {MID})"),
            ParseError::UnterminatedString { position: 72 },
        ),
        (
            uid("'0x000000000000000\\x30'", MID),
            ParseError::Escape { position: 32 },
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(parse(&text), Err(expected), "{text}");
    }
}

#[test]
fn syntax_errors_point_at_the_token() {
    let and = format!(
        "shardRange(object.metadata.uid, {LOW}, {MID}) && shardRange(object.metadata.uid, {MID}, {TOP})"
    );
    for (text, position, found, expected) in [
        (and.as_str(), 76, "`&&`", "`||` or the end"),
        (
            "object.metadata.uid > '0x0'",
            6,
            "`.`",
            "`(` after the function name",
        ),
        (
            "shardRange(object.metadata.uid",
            30,
            "the end",
            "`,` or `)`",
        ),
        ("|| x", 0, "`||`", "shardRange(...) or `(`"),
        (
            "shardRange(object., 'a', 'b')",
            18,
            "`,`",
            "a field name after `.`",
        ),
        (
            "(shardRange(object.metadata.uid, 'a', 'b')",
            42,
            "the end",
            "`)` or `||`",
        ),
    ] {
        match parse(text) {
            Err(ParseError::Unexpected {
                position: p,
                found: f,
                expected: e,
            }) => assert_eq!((p, f.as_str(), e), (position, found, expected), "{text}"),
            other => panic!("{text}: {other:?}"),
        }
    }
}

#[test]
fn messages_name_the_problem() {
    let err = parse(&format!("shardRange(object.metadata.uid, '0xff', {MID})")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "hexStart \"0xff\" must have exactly 16 hex digits (\"0x00000000000000ff\"?)"
    );
    let err = parse("shardRange(object.metadata.labels, '0x00', '0x80')").unwrap_err();
    assert!(err.to_string().contains("object.metadata.labels"), "{err}");
}

#[test]
fn the_matched_objects_are_those_whose_hash_is_in_range() {
    let lower = parse(&format!("shardRange(object.metadata.uid, {LOW}, {MID})")).unwrap();
    let upper = parse(&format!("shardRange(object.metadata.uid, {MID}, {TOP})")).unwrap();
    let mut in_upper = 0;
    for i in 0..200 {
        // Uids that differ early: FNV-1a's top bits depend little on the last bytes.
        let uid = format!("{i:08x}-0000-4000-8000-000000000000");
        assert_ne!(lower.matches(&uid), upper.matches(&uid), "{uid}");
        assert_eq!(upper.matches(&uid), hash(&uid) >= 1 << 63, "{uid}");
        in_upper += usize::from(upper.matches(&uid));
    }
    assert!(
        (50..150).contains(&in_upper),
        "{in_upper} of 200 in the upper half"
    );
}

fn ranges() -> impl Strategy<Value = ShardRange> {
    prop_oneof![
        (any::<u64>(), any::<u64>()).prop_filter_map("empty", |(a, b)| ShardRange::new(
            a.min(b),
            a.max(b).into()
        )
        .ok()),
        any::<u64>().prop_map(ShardRange::from_start),
    ]
}

fn selectors() -> impl Strategy<Value = ShardSelector> {
    (
        prop_oneof![Just(ShardField::Uid), Just(ShardField::Namespace)],
        prop::collection::vec(ranges(), 1..5),
    )
        .prop_map(|(field, ranges)| ShardSelector::new(field, ranges).expect("non-empty"))
}

proptest! {
    /// What a selector writes parses back to it, and is what the server echoes: parsing the
    /// written form and writing it again changes nothing.
    #[test]
    fn written_selectors_parse_back(selector in selectors()) {
        let text = selector.to_string();
        let parsed: ShardSelector = text.parse().map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        prop_assert_eq!(&parsed, &selector);
        prop_assert_eq!(parsed.to_string(), text);
    }

    /// Shards `0..n` of a split are disjoint and cover every hash; an owned set matches exactly
    /// the hashes of its shards.
    #[test]
    fn owned_shards_select_exactly_their_hashes(
        count in 1u32..40,
        owned in prop::collection::vec(0u32..40, 1..10),
        hashes in prop::collection::vec(any::<u64>(), 1..50),
    ) {
        let owned: Vec<u32> = owned.into_iter().map(|s| s % count).collect();
        let selector = ShardSelector::for_shards(ShardField::Uid, count, owned.clone()).unwrap();
        let shards = ShardRange::split(count).unwrap();
        for h in hashes.into_iter().chain([0, u64::MAX]) {
            let homes: Vec<u32> = (0..count).filter(|&i| shards[i as usize].contains(h)).collect();
            prop_assert_eq!(homes.len(), 1);
            prop_assert_eq!(selector.matches_hash(h), owned.contains(&homes[0]));
        }
    }

    /// `covers` against a model: ranges on a grid of 16 cells of 2^60 hashes, so that the
    /// cells selected can be counted one by one.
    #[test]
    fn a_selector_covers_a_range_exactly_when_it_selects_all_of_it(
        ranges in prop::collection::vec((0u8..16, 1u8..=16), 1..5),
        probe in (0u8..16, 1u8..=16),
    ) {
        const CELL: u128 = 1 << 60;
        let range = |(a, len): (u8, u8)| {
            let end = (u128::from(a) + u128::from(len)).min(16);
            ShardRange::new((u128::from(a) * CELL) as u64, end * CELL).unwrap()
        };
        let selector = ShardSelector::new(ShardField::Uid, ranges.iter().copied().map(range)).unwrap();
        let probe = range(probe);
        let cells = (probe.start() as u128 / CELL)..(probe.end() / CELL);
        let every_cell = cells.into_iter().all(|c| selector.matches_hash((c * CELL) as u64));
        prop_assert_eq!(selector.covers(probe), every_cell);
    }

    /// Nothing makes the parser panic.
    #[test]
    fn arbitrary_text_is_parsed_or_refused(text in "\\PC{0,80}") {
        let _ = text.parse::<ShardSelector>();
    }
}
