//! The hand-written declarations of src/lib.rs against include/capturepool.h,
//! so that they cannot drift apart: every function of the header is
//! declared with the same name and number of arguments (and no function is
//! declared that the header lacks), every struct has the same fields in the
//! same order, and every status and enum constant has the header's value.
use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

fn header() -> String {
    fs::read_to_string(root().join("include/capturepool.h")).expect("include/capturepool.h")
}

fn sys() -> String {
    fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).expect("src/lib.rs")
}

/// The header without comments and preprocessor lines, whitespace folded.
fn c_code(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("/*") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find("*/").expect("closed comment") + start + 2;
        out.push(' ');
        rest = &rest[end..];
    }
    out.push_str(rest);
    let mut code = String::new();
    let mut continued = false;
    for line in out.lines() {
        let directive = continued || line.trim_start().starts_with('#');
        continued = directive && line.trim_end().ends_with('\\');
        if !directive {
            code.push_str(line);
            code.push(' ');
        }
    }
    code.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Commas at parenthesis depth 0 of an argument list, as an arity.
fn arity(args: &str) -> usize {
    let args = args.trim().trim_end_matches(',').trim();
    if args.is_empty() || args == "void" {
        return 0;
    }
    let mut depth = 0i32;
    let mut n = 1;
    for c in args.chars() {
        match c {
            '(' | '<' => depth += 1,
            ')' | '>' => depth -= 1,
            ',' if depth == 0 => n += 1,
            _ => {}
        }
    }
    n
}

/// The text between the parenthesis at `open` and its match.
fn balanced(s: &str, open: usize) -> &str {
    let mut depth = 0;
    for (i, c) in s[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &s[open + 1..open + i];
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced parentheses");
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn header_functions(code: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for stmt in code.split(';') {
        let stmt = stmt.trim();
        // Function declarations only: not typedefs, not struct bodies.
        let stmt = stmt.rsplit(['{', '}']).next().unwrap().trim();
        if stmt.starts_with("typedef") || stmt.is_empty() {
            continue;
        }
        let Some(open) = stmt.find('(') else { continue };
        let name: String = stmt[..open].trim_end().chars().rev().take_while(|c| is_ident(*c)).collect();
        let name: String = name.chars().rev().collect();
        if !name.starts_with("cpool_") {
            continue;
        }
        out.insert(name, arity(balanced(stmt, open)));
    }
    out
}

fn sys_functions(code: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let mut rest = code;
    while let Some(at) = rest.find("pub fn ") {
        let after = &rest[at + 7..];
        let open = after.find('(').unwrap();
        let name = after[..open].trim().to_string();
        out.insert(name, arity(balanced(after, open)));
        rest = &after[open..];
    }
    out
}

fn header_structs(code: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let mut rest = code;
    while let Some(at) = rest.find("typedef struct ") {
        let after = &rest[at + 15..];
        let name: String = after.chars().take_while(|c| is_ident(*c)).collect();
        let after_name = &after[name.len()..];
        if after_name.trim_start().starts_with('{') {
            let open = after_name.find('{').unwrap();
            let close = after_name.find('}').unwrap();
            let mut fields = Vec::new();
            for decl in after_name[open + 1..close].split(';') {
                let decl = decl.trim();
                if decl.is_empty() {
                    continue;
                }
                // "uint64_t a, b, c": the type is everything before the first declarator.
                for (i, part) in decl.split(',').enumerate() {
                    let part = part.trim().trim_start_matches('*');
                    let field = if i == 0 { part.rsplit([' ', '*']).next().unwrap() } else { part };
                    fields.push(field.to_string());
                }
            }
            out.insert(name.clone(), fields);
        }
        rest = after_name;
    }
    out
}

fn sys_structs(code: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let mut rest = code;
    while let Some(at) = rest.find("pub struct ") {
        let after = &rest[at + 11..];
        let name: String = after.chars().take_while(|c| is_ident(*c)).collect();
        let open = after.find('{').unwrap();
        let close = after.find('}').unwrap();
        let fields: Vec<String> = after[open + 1..close]
            .split(',')
            .filter_map(|f| f.trim().strip_prefix("pub "))
            .map(|f| f.split(':').next().unwrap().trim().to_string())
            .collect();
        if !fields.is_empty() {
            out.insert(name, fields);
        }
        rest = &after[close..];
    }
    out
}

/// `CPOOL_NAME = value` of the header's enums and its status map.
fn header_constants(text: &str, code: &str) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    // The status map: X(NAME, value, "text").
    let map = &text[text.find("#define CPOOL_STATUS_MAP(X)").unwrap()..];
    let map = &map[..map.find("/* What every function").unwrap()];
    for entry in map.split("X(").skip(2) {
        let mut parts = entry.splitn(3, ',');
        let name = parts.next().unwrap().trim();
        let value: i64 = parts.next().unwrap().trim().parse().unwrap();
        out.insert(format!("CPOOL_{name}"), value);
    }
    // typedef enum name { A = 0, B, C } name;
    let mut rest = code;
    while let Some(at) = rest.find("typedef enum ") {
        let after = &rest[at..];
        let open = after.find('{').unwrap();
        let close = after.find('}').unwrap();
        let mut next = 0i64;
        for item in after[open + 1..close].split(',') {
            let item = item.trim();
            if item.is_empty() || !item.starts_with("CPOOL_") || item.contains('(') {
                continue;
            }
            let (name, value) = match item.split_once('=') {
                Some((n, v)) => (n.trim(), v.trim().parse().unwrap()),
                None => (item, next),
            };
            out.insert(name.to_string(), value);
            next = value + 1;
        }
        rest = &after[close..];
    }
    out
}

fn sys_constants(code: &str) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for line in code.lines() {
        let Some(decl) = line.trim().strip_prefix("pub const CPOOL_") else { continue };
        let name = format!("CPOOL_{}", decl.split(':').next().unwrap());
        let value = decl.rsplit('=').next().unwrap().trim().trim_end_matches(';');
        if let Ok(v) = value.parse() {
            out.insert(name, v);
        }
    }
    out
}

#[test]
fn every_function_of_the_header_is_declared_with_its_arity() {
    let ours = sys_functions(&sys());
    let theirs = header_functions(&c_code(&header()));
    assert!(theirs.len() > 60, "the header parser found only {} functions", theirs.len());
    let mut problems = Vec::new();
    for (name, n) in &theirs {
        match ours.get(name) {
            None => problems.push(format!("{name} ({n} arguments) is not declared in capturepool-sys")),
            Some(m) if m != n => problems.push(format!("{name}: {n} arguments in the header, {m} in capturepool-sys")),
            _ => {}
        }
    }
    for name in ours.keys() {
        if !theirs.contains_key(name) {
            problems.push(format!("{name} is declared in capturepool-sys but not in the header"));
        }
    }
    assert!(problems.is_empty(), "capturepool-sys and include/capturepool.h differ:\n{}", problems.join("\n"));
}

#[test]
fn every_struct_has_the_headers_fields_in_order() {
    let ours = sys_structs(&sys());
    let theirs = header_structs(&c_code(&header()));
    assert!(theirs.contains_key("cpool_pool_stats"), "the header parser found no structs: {theirs:?}");
    for (name, fields) in &theirs {
        assert_eq!(ours.get(name), Some(fields), "fields of {name}");
    }
}

#[test]
fn every_constant_has_the_headers_value() {
    let text = header();
    let theirs = header_constants(&text, &c_code(&text));
    let ours = sys_constants(&sys());
    assert!(theirs.contains_key("CPOOL_ERR_SUSPENDED") && theirs.contains_key("CPOOL_CAPTURE_RELAXED"));
    for (name, value) in &theirs {
        assert_eq!(ours.get(name), Some(value), "{name}");
    }
}

#[test]
fn struct_sizes_match_the_c_layout() {
    use capturepool_sys::*;
    // Fields are 8 bytes wide after struct_size (usize) on 64-bit targets;
    // the options end with a bool padded to 8.
    assert_eq!(std::mem::size_of::<cpool_pool_options>(), 32);
    assert_eq!(std::mem::size_of::<cpool_pool_stats>(), 8 * 13);
    assert_eq!(std::mem::size_of::<cpool_graph_stats>(), 8 * 7);
}

#[test]
fn the_linked_library_has_the_headers_version() {
    let v = unsafe { capturepool_sys::cpool_version() };
    assert_eq!(v, capturepool_sys::CPOOL_VERSION_NUMBER);
}

#[test]
fn the_parser_sees_a_drift() {
    // A declaration with an argument too many, and a missing field, are caught.
    let drifted = sys().replace(
        "pub fn cpool_pool_seal(pool: *mut cpool_pool);",
        "pub fn cpool_pool_seal(pool: *mut cpool_pool, extra: i32);",
    );
    assert_ne!(sys_functions(&drifted)["cpool_pool_seal"], header_functions(&c_code(&header()))["cpool_pool_seal"]);
    let drifted = sys().replace("    pub own_bytes: u64,\n", "");
    assert_ne!(sys_structs(&drifted)["cpool_graph_stats"], header_structs(&c_code(&header()))["cpool_graph_stats"]);
}
