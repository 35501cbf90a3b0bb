//! Keeps the library's modules layered: no two sibling modules of `src/` may depend on each
//! other, directly or through other siblings.
//!
//! A cycle between modules means neither can be understood, tested or moved without the
//! other (see "The parts" in docs/ARCHITECTURE.md). The compiler accepts cycles, so this
//! test looks for them: it reads every file of `src/`, collects the paths that start with
//! `crate::`, `super::` or `self::` (in `use` trees, groups included, and in code), resolves
//! them to modules, and reports every strongly connected group of sibling modules. Comments
//! and string literals are skipped; an import from a child to its parent is not a cycle,
//! and neither is an import made by test code (any module named `tests`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Cycles known today, each removed by another part of the "Core seams" redesign: the
/// parent module (`crate` for the root) and the members of the cycle, sorted.
/// Cycles tolerated for now, as (parent module, sibling group). None today: a new entry
/// needs a reason and a plan to remove it.
const ALLOWED: &[(&str, &[&str])] = &[];

/// One token of Rust source, as far as paths need.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Star,
    Other,
}

/// Tokens with their line numbers; comments, strings and character literals are dropped.
fn tokens(source: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = source.chars().collect();
    let (mut out, mut i, mut line) = (Vec::new(), 0, 1);
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 1;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 1;
                    if depth == 0 {
                        i += 1;
                        break;
                    }
                }
                i += 1;
            }
        } else if c == '"' {
            i = skip_string(&chars, i + 1, 0);
        } else if c == '\'' {
            // A character literal ('x', '\n') or a lifetime ('a), which is skipped alone.
            i += match (at(i + 1), at(i + 2)) {
                ('\\', _) => {
                    (i + 3..chars.len())
                        .find(|&j| chars[j] == '\'')
                        .unwrap_or(i)
                        + 1
                        - i
                }
                (_, '\'') => 3,
                _ => 1,
            };
        } else if c.is_alphanumeric() || c == '_' {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let hashes = (i..).take_while(|&j| at(j) == '#').count();
            if (word == "r" || word == "br") && at(i + hashes) == '"' {
                i = skip_string(&chars, i + hashes + 1, hashes);
            } else {
                out.push((Token::Ident(word), line));
            }
        } else {
            let (token, width) = match (c, at(i + 1)) {
                (':', ':') => (Token::PathSep, 2),
                ('{', _) => (Token::Open, 1),
                ('}', _) => (Token::Close, 1),
                (',', _) => (Token::Comma, 1),
                ('*', _) => (Token::Star, 1),
                _ => (Token::Other, 1),
            };
            if !c.is_whitespace() {
                out.push((token, line));
            }
            i += width;
        }
        line += chars[start..i.min(chars.len())]
            .iter()
            .filter(|&&c| c == '\n')
            .count();
    }
    out
}

/// The index after a string literal whose body starts at `i`; `hashes` for raw strings.
fn skip_string(chars: &[char], mut i: usize, hashes: usize) -> usize {
    while i < chars.len() {
        if hashes == 0 && chars[i] == '\\' {
            i += 2;
            continue;
        }
        if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
            return i + 1 + hashes;
        }
        i += 1;
    }
    i
}

/// Reads a path or use tree at `i` (after `prefix`); pushes every full path it names and
/// returns the index after it.
fn use_tree(
    tokens: &[(Token, usize)],
    mut i: usize,
    prefix: Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    let mut path = prefix;
    loop {
        match tokens.get(i).map(|t| &t.0) {
            Some(Token::Ident(name)) => {
                path.push(name.clone());
                i += 1;
                if tokens.get(i).map(|t| &t.0) != Some(&Token::PathSep) {
                    out.push(path);
                    return i;
                }
                i += 1;
            }
            Some(Token::Open) => {
                i += 1;
                while let Some((token, _)) = tokens.get(i) {
                    match token {
                        Token::Close => return i + 1,
                        Token::Comma => i += 1,
                        _ => i = use_tree(tokens, i, path.clone(), out),
                    }
                }
                return i;
            }
            _ => {
                out.push(path);
                return i + 1;
            }
        }
    }
}

/// `path` (as written, starting with `crate`, `super` or `self`) made absolute from the
/// module `here`.
fn resolve(here: &[String], path: &[String]) -> Vec<String> {
    let mut out = here.to_vec();
    let mut leading = true;
    for segment in path {
        match (segment.as_str(), leading) {
            ("crate", true) => out.clear(),
            ("super", true) => {
                out.pop();
            }
            ("self", _) => {}
            _ => {
                leading = false;
                out.push(segment.clone());
            }
        }
    }
    out
}

/// The module a file of `src/` defines (`api/mod.rs` is `api`, `lib.rs` the root).
fn module_of(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// A dependency between two sibling modules, with where it was first seen.
type Edges = BTreeMap<(Vec<String>, String, String), String>;

/// Every dependency between siblings in the given files (path under `src/`, source).
fn edges(files: &[(String, String)]) -> Edges {
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(f, _)| module_of(f)).collect();
    let mut found = Edges::new();
    for (file, source) in files {
        let tokens = tokens(source);
        // Inline modules (`mod tests { .. }`) change what `super` means inside them.
        let (mut here, mut depth, mut opened_at) = (module_of(file), 0usize, Vec::new());
        let mut i = 0;
        while i < tokens.len() {
            let ident = |k: usize| match tokens.get(k) {
                Some((Token::Ident(w), _)) => Some(w.as_str()),
                _ => None,
            };
            match &tokens[i].0 {
                Token::Open => depth += 1,
                Token::Close => {
                    depth = depth.saturating_sub(1);
                    if opened_at.last() == Some(&depth) {
                        opened_at.pop();
                        here.pop();
                    }
                }
                Token::Ident(w) if w == "mod" => {
                    if let (Some(name), Some((Token::Open, _))) = (ident(i + 1), tokens.get(i + 2))
                    {
                        here.push(name.to_string());
                        opened_at.push(depth);
                        depth += 1;
                        i += 3;
                        continue;
                    }
                }
                Token::Ident(w)
                    if matches!(w.as_str(), "crate" | "super" | "self")
                        && tokens.get(i + 1).map(|t| &t.0) == Some(&Token::PathSep) =>
                {
                    let line = tokens[i].1;
                    let mut paths = Vec::new();
                    i = use_tree(&tokens, i, Vec::new(), &mut paths);
                    // Test modules may reach anything they test against: a test's import
                    // does not layer the library, so they are left out.
                    if here.iter().any(|m| m == "tests") {
                        continue;
                    }
                    for path in paths {
                        let to = resolve(&here, &path);
                        let common = here.iter().zip(&to).take_while(|(a, b)| a == b).count();
                        if common < here.len()
                            && common < to.len()
                            && modules.contains(&to[..=common])
                        {
                            let key = (
                                to[..common].to_vec(),
                                here[common].clone(),
                                to[common].clone(),
                            );
                            found
                                .entry(key)
                                .or_insert_with(|| format!("src/{file}:{line}"));
                        }
                    }
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
    found
}

/// Every group of two or more sibling modules that reach each other: the parent (`crate`
/// for the root), the members sorted, and one import per dependency inside the group.
fn cycles(edges: &Edges) -> Vec<(String, Vec<String>, Vec<String>)> {
    let mut by_parent: BTreeMap<&Vec<String>, BTreeMap<&String, BTreeSet<&String>>> =
        BTreeMap::new();
    for (parent, from, to) in edges.keys() {
        by_parent
            .entry(parent)
            .or_default()
            .entry(from)
            .or_default()
            .insert(to);
    }
    let mut out = Vec::new();
    for (parent, graph) in by_parent {
        let reach = |start: &String| {
            let mut seen = BTreeSet::new();
            let mut stack = vec![start];
            while let Some(m) = stack.pop() {
                for &next in graph.get(m).into_iter().flatten() {
                    if seen.insert(next.clone()) {
                        stack.push(next);
                    }
                }
            }
            seen
        };
        let mut done = BTreeSet::new();
        for &module in graph.keys() {
            let group: Vec<String> = reach(module)
                .into_iter()
                .filter(|m| reach(m).contains(module))
                .collect();
            if group.len() < 2 || !done.insert(group.clone()) {
                continue;
            }
            let evidence = edges
                .iter()
                .filter(|((p, a, b), _)| p == parent && group.contains(a) && group.contains(b))
                .map(|((_, a, b), at)| format!("{a} -> {b} ({at})"))
                .collect();
            let name = if parent.is_empty() {
                "crate".to_string()
            } else {
                parent.join("::")
            };
            out.push((name, group, evidence));
        }
    }
    out
}

/// Every `.rs` file under `dir`, as (path relative to `root`, source).
fn read_tree(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            read_tree(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(root).expect("under root");
            let source = std::fs::read_to_string(&path).expect("readable source");
            out.push((relative.to_string_lossy().replace('\\', "/"), source));
        }
    }
}

#[test]
fn sibling_modules_of_the_library_do_not_import_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    read_tree(&root, &root, &mut files);
    // main.rs is the binary's root: it reaches the library as `clockwork::`, not `crate::`.
    files.retain(|(f, _)| f != "main.rs");
    let found = cycles(&edges(&files));
    let allowed =
        |parent: &str, group: &[String]| ALLOWED.iter().any(|(p, g)| *p == parent && *g == group);
    let new: Vec<_> = found.iter().filter(|(p, g, _)| !allowed(p, g)).collect();
    assert!(
        new.is_empty(),
        "import cycles between sibling modules: {new:#?}"
    );
    for (parent, group) in ALLOWED {
        assert!(
            found.iter().any(|(p, g, _)| p == parent && g == group),
            "the allowed cycle {parent}::{group:?} is gone: remove it from ALLOWED"
        );
    }
}

fn sources(files: &[(&str, &str)]) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(f, s)| (f.to_string(), s.to_string()))
        .collect()
}

#[test]
fn a_cycle_through_groups_inline_paths_and_three_modules_is_found() {
    let files = sources(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "use crate::{b::{self, X}, time};"),
        ("b.rs", "fn f() { let _ = super::c::g(); }"),
        ("c/mod.rs", "mod inner;"),
        ("c/inner.rs", "use super::super::a::Y as Z;"),
    ]);
    let found = cycles(&edges(&files));
    assert_eq!(found.len(), 1, "{found:#?}");
    let (parent, group, evidence) = &found[0];
    assert_eq!(parent, "crate");
    assert_eq!(group, &["a", "b", "c"]);
    assert!(
        evidence.contains(&"c -> a (src/c/inner.rs:1)".to_string()),
        "{evidence:?}"
    );
}

#[test]
fn comments_strings_children_and_test_code_make_no_cycle() {
    let files = sources(&[
        ("lib.rs", "mod a; mod b;"),
        (
            "a.rs",
            "use crate::b::X; // crate::a in a comment of a\nmod child;",
        ),
        (
            "a/child.rs",
            "use super::Y; fn f() { let _ = r#\"crate::b\"#; }",
        ),
        ("b/tests.rs", "use crate::a::Z;"),
        (
            "b.rs",
            "/* use crate::a::Y; */ const S: &str = \"crate::a\"; const C: char = '\"';\n\
             #[cfg(test)] mod tests { use super::*; use crate::a::Y; fn t<'a>() {} }",
        ),
    ]);
    let found = edges(&files);
    let pairs: Vec<_> = found.keys().map(|(_, a, b)| format!("{a}->{b}")).collect();
    assert_eq!(pairs, ["a->b"]);
    assert!(cycles(&found).is_empty());
}
