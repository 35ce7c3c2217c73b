//! Graphviz record labels (`shape="record"`): `{KERNEL | {ID | 0 | name} | ...}`, as the verbose
//! driver dump writes them, and the name/value pairs in them.

/// One field of a record: text, or a group of fields (`{a | b}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Field {
    Text(String),
    Group(Vec<Field>),
}

impl Field {
    pub fn text(&self) -> Option<&str> {
        match self {
            Field::Text(t) => Some(t),
            Field::Group(_) => None,
        }
    }
}

/// Parses a record label into its top-level fields; a label that is one `{...}` group gives
/// that group's fields. `\x` stands for `x`; `<port>` names are dropped. Iterative.
pub(super) fn parse(label: &str) -> Result<Vec<Field>, String> {
    // Groups being built, innermost last; the bottom one is the top level.
    let mut stack: Vec<Vec<Field>> = vec![Vec::new()];
    let mut text = String::new();
    // Whether the current field (since the last '|' or '{') already holds a group.
    let mut has_group = false;
    let mut chars = label.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    text.push(next);
                }
            }
            '<' => {
                // A port name: skipped up to the matching '>'.
                for p in chars.by_ref() {
                    if p == '>' {
                        break;
                    }
                }
            }
            '{' => {
                text.clear();
                stack.push(Vec::new());
                has_group = false;
            }
            '}' => {
                let mut group = stack.pop().unwrap_or_default();
                finish(&mut group, &mut text, has_group);
                let whole = stack.len() == 1 && chars.as_str().trim().is_empty();
                let Some(parent) = stack.last_mut() else {
                    return Err("a '}' closes no '{'".into());
                };
                if whole && parent.is_empty() {
                    // The whole label is one group: its fields are the record's.
                    return Ok(group);
                }
                parent.push(Field::Group(group));
                has_group = true;
            }
            '|' => {
                if let Some(top) = stack.last_mut() {
                    finish(top, &mut text, has_group);
                }
                has_group = false;
            }
            c => text.push(c),
        }
    }
    if stack.len() != 1 {
        return Err(format!("{} '{{' not closed", stack.len() - 1));
    }
    let mut top = stack.pop().unwrap_or_default();
    finish(&mut top, &mut text, has_group);
    Ok(top)
}

/// Ends the current field: its text, unless it was a group.
fn finish(group: &mut Vec<Field>, text: &mut String, has_group: bool) {
    if !has_group {
        group.push(Field::Text(text.trim().to_string()));
    }
    text.clear();
}

/// The `name = value` pairs of a record, in order. A group holding a group of names followed by
/// a group of as many values pairs them; when a text or a group of `k` names comes before them
/// (`{Extent | {WidthInBytes | ...} | {1024 | ...}}`, `{{src | dst} | {names} | {values}}`),
/// names get it as a prefix: `Extent.WidthInBytes`, `src.Device` (the names split into `k`
/// equal runs). A group of exactly two texts is one pair (`{cooperative | 0}`). A text
/// followed by a group of pairs names them all (`{srcPos | {{x | 0} | {y | 0}}}` gives
/// `srcPos.x`, `srcPos.y`). A group of names holds no text that starts with a digit, so a list
/// of pairs (`{{Width | 96} | {Height | 4}}`) is never read as names and values.
pub(super) fn pairs(fields: &[Field]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut todo: Vec<(String, &[Field])> = vec![(String::new(), fields)];
    while let Some((prefix, group)) = todo.pop() {
        let named = |key: &str| {
            if prefix.is_empty() {
                key.to_string()
            } else {
                format!("{prefix}.{key}")
            }
        };
        let texts = |f: &Field| -> Option<Vec<String>> {
            match f {
                Field::Group(g) => g.iter().map(|x| x.text().map(str::to_string)).collect(),
                Field::Text(_) => None,
            }
        };
        if group.len() == 2 {
            if let (Some(k), Some(v)) = (group[0].text(), group[1].text()) {
                out.push((named(k), v.to_string()));
                continue;
            }
            if let (Some(k), Field::Group(inner)) = (group[0].text(), &group[1]) {
                let pair = |f: &Field| matches!(f, Field::Group(g) if g.len() == 2);
                if !k.is_empty() && !inner.is_empty() && inner.iter().all(pair) {
                    todo.push((named(k), inner));
                    continue;
                }
            }
        }
        // Children that were names, values or prefixes are not searched again.
        let mut used = vec![false; group.len()];
        let mut i = 0;
        while i + 1 < group.len() {
            let (names, values) = (texts(&group[i]), texts(&group[i + 1]));
            let is_names = |names: &[String]| {
                !names.is_empty()
                    && names
                        .iter()
                        .all(|n| !n.starts_with(|c: char| c.is_ascii_digit()))
            };
            match (names, values) {
                (Some(names), Some(values)) if names.len() == values.len() && is_names(&names) => {
                    let before = i.checked_sub(1).map(|p| (p, &group[p]));
                    let prefixes: Vec<String> = match before {
                        Some((_, Field::Text(t))) if !t.is_empty() => vec![t.clone()],
                        Some((p, f @ Field::Group(_))) if !used[p] => {
                            used[p] = true;
                            texts(f).unwrap_or_default()
                        }
                        _ => Vec::new(),
                    };
                    let run = if prefixes.is_empty() || names.len() % prefixes.len() != 0 {
                        0
                    } else {
                        names.len() / prefixes.len()
                    };
                    for (j, (n, v)) in names.into_iter().zip(values).enumerate() {
                        let key = match run {
                            0 => named(&n),
                            run => named(&format!("{}.{n}", prefixes[j / run])),
                        };
                        out.push((key, v));
                    }
                    used[i] = true;
                    used[i + 1] = true;
                    i += 2;
                }
                _ => i += 1,
            }
        }
        for (f, used) in group.iter().zip(used).rev() {
            if let (Field::Group(g), false) = (f, used) {
                todo.push((prefix.clone(), g));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Field {
        Field::Text(s.to_string())
    }

    #[test]
    fn kernel_record() {
        let fields = parse(
            "{KERNEL\n| {ID | 0 (topoId: 2) | k\\<\\<\\<1,256,0\\>\\>\\>}\n\
             | {{node handle | func handle} | {0x1 | 0x2}}\n| {cooperative | 0}\n}",
        )
        .unwrap();
        assert_eq!(fields[0], t("KERNEL"));
        assert_eq!(
            fields[1],
            Field::Group(vec![t("ID"), t("0 (topoId: 2)"), t("k<<<1,256,0>>>")])
        );
        let pairs = pairs(&fields);
        assert!(pairs.contains(&("node handle".into(), "0x1".into())));
        assert!(pairs.contains(&("cooperative".into(), "0".into())));
    }

    #[test]
    fn prefixes_split_names() {
        let fields =
            parse("{X | {{src | dst} | {a | b | a | b} | {1 | 2 | 3 | 4}} | {Extent | {w} | {9}}}")
                .unwrap();
        let pairs = pairs(&fields);
        assert_eq!(
            pairs,
            vec![
                ("src.a".to_string(), "1".to_string()),
                ("src.b".into(), "2".into()),
                ("dst.a".into(), "3".into()),
                ("dst.b".into(), "4".into()),
                ("Extent.w".into(), "9".into()),
            ]
        );
    }

    #[test]
    fn runtime_api_copy_record() {
        let fields = parse(
            "{\nMEMCPY\n| {{ID | node handle} | {0 (topoId: 1) | 0x01}}\n\
             | {kind | HtoD (HOST PINNED to DEVICE)}\n\
             | {{srcPtr | dstPtr} | {pitch | ptr | xsize | ysize | pitch | ptr | xsize | ysize} \
             | {128 | 0x10 | 0 | 0 | 512 | 0x20 | 0 | 8}}\n\
             | {{srcPos | {{x | 4} | {y | 1} | {z | 0}}} | {dstPos | {{x | 48} | {y | 4} | {z | 2}}} \
             | {Extent | {{Width | 32} | {Height | 2} | {Depth | 3}}}}\n}",
        )
        .unwrap();
        let pairs = pairs(&fields);
        let get = |k: &str| {
            pairs
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("node handle"), Some("0x01"));
        assert_eq!(get("kind"), Some("HtoD (HOST PINNED to DEVICE)"));
        assert_eq!(get("srcPtr.pitch"), Some("128"));
        assert_eq!(get("dstPtr.ptr"), Some("0x20"));
        assert_eq!(get("dstPtr.ysize"), Some("8"));
        assert_eq!(get("srcPos.x"), Some("4"));
        assert_eq!(get("dstPos.z"), Some("2"));
        assert_eq!(get("Extent.Width"), Some("32"));
        assert_eq!(get("Extent.Depth"), Some("3"));
        assert_eq!(get("x"), None);
    }

    #[test]
    fn unbalanced() {
        assert!(parse("{a | {b}").is_err());
        assert!(parse("a}").is_err());
    }
}
