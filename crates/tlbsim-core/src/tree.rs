//! Config trees (the JSON shape every config document is read into): TOML files, dotted-key
//! overrides, merging, and typed parsing with errors that name the dotted key. Below
//! `config` and `registry`, which both read trees.

use crate::error::{Error, Result};
use serde_json::{Map, Value};
use std::path::Path;

/// Read a TOML file into a JSON-shaped tree.
pub fn load_toml_file(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::Io { context: format!("reading config {}", path.display()), source: e })?;
    parse_toml(&text).map_err(|m| Error::config(path.display().to_string(), m))
}

/// A config tree as TOML text that `load_toml_file` reads back to the same tree: keys
/// whose value is null (an option not set) are left out, as TOML has no null.
pub fn to_toml(tree: &Value) -> std::result::Result<String, String> {
    fn convert(v: &Value) -> Option<toml::Value> {
        Some(match v {
            Value::Null => return None,
            Value::Bool(b) => toml::Value::Boolean(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => toml::Value::Integer(i),
                None => toml::Value::Float(n.as_f64()?),
            },
            Value::String(s) => toml::Value::String(s.clone()),
            Value::Array(a) => toml::Value::Array(a.iter().filter_map(convert).collect()),
            Value::Object(m) => toml::Value::Table(m.iter().filter_map(|(k, v)| Some((k.clone(), convert(v)?))).collect()),
        })
    }
    match convert(tree) {
        Some(toml::Value::Table(t)) => toml::to_string(&t).map_err(|e| e.to_string()),
        _ => Err("a config must be a table".into()),
    }
}

/// Parse TOML text into a JSON-shaped tree. The error says where (line, column).
pub fn parse_toml(text: &str) -> std::result::Result<Value, String> {
    let v: toml::Value = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_owned())?;
    serde_json::to_value(v).map_err(|e| e.to_string())
}

/// Apply one `dotted.key=value` override. The value is read as a TOML literal
/// (`64`, `true`, `"lru"`, `[1, 2]`); a value that is not one is taken as a bare string,
/// so `--set os.coherence=linux` works without quotes.
pub fn apply_override(tree: &mut Value, spec: &str) -> Result<()> {
    // An error names the key, or the whole override when its key is blank (`--set ""`).
    let named = |k: &str| if k.trim().is_empty() { format!("--set {spec:?}") } else { k.to_owned() };
    let (key, raw) = spec.split_once('=').ok_or_else(|| Error::config(named(spec), "an override is dotted.key=value"))?;
    let key = key.trim();
    if key.is_empty() || key.split('.').any(str::is_empty) {
        return Err(Error::config(named(key), "an override's key is dotted names, like machine.tlb.l1d.entries"));
    }
    let raw = raw.trim();
    let value = match toml::from_str::<toml::Value>(&format!("v = {raw}")) {
        Ok(toml::Value::Table(mut t)) => serde_json::to_value(t.remove("v").expect("v present")).map_err(|e| Error::config(key, e.to_string()))?,
        _ => Value::String(raw.to_owned()),
    };
    let mut node = tree;
    let parts: Vec<&str> = key.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        let obj = match node {
            Value::Object(o) => o,
            _ => return Err(Error::config(parts[..i].join("."), format!("is not a table, so {key} cannot be set"))),
        };
        if i + 1 == parts.len() {
            obj.insert((*part).to_owned(), value);
            return Ok(());
        }
        node = obj.entry((*part).to_owned()).or_insert_with(|| Value::Object(Map::new()));
    }
    unreachable!("key has at least one part")
}

/// Deep-merge `top` into `base`: tables merge key by key, anything else replaces.
pub fn merge(base: &mut Value, top: Value) {
    match (base, top) {
        (Value::Object(b), Value::Object(t)) => {
            for (k, v) in t {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, top) => *slot = top,
    }
}

/// Typed parse; errors name the dotted key (`machine.tlb.l1d.ways`) and what was expected.
pub fn from_tree<T: serde::de::DeserializeOwned>(tree: Value) -> Result<T> {
    from_tree_at("", tree)
}

/// [`from_tree`] of the table at dotted key `prefix` (errors name the whole key).
pub fn from_tree_at<T: serde::de::DeserializeOwned>(prefix: &str, tree: Value) -> Result<T> {
    serde_path_to_error::deserialize(tree).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        // serde_path_to_error's path already ends with an unknown field's own name.
        let key = match unknown_field(&inner) {
            // An empty key (`"" = 1` in TOML) is named as TOML spells it.
            Some("") if path == "." || path.is_empty() => "\"\"".to_owned(),
            Some(field) if path == "." || path.is_empty() => field.to_owned(),
            _ => path,
        };
        let message = if unknown_field(&inner).is_some() {
            format!("unknown key; {}", inner.split_once(", expected").map(|(_, rest)| format!("expected{rest}")).unwrap_or(inner.clone()))
        } else {
            plain_types(&inner)
        };
        let key = match (prefix.is_empty(), key.as_str()) {
            (true, _) => key,
            (false, "." | "") => prefix.to_owned(),
            (false, _) => format!("{prefix}.{key}"),
        };
        Error::config(key, message)
    })
}

/// A serde message in the words of a config file: integers, numbers, strings, lists and
/// tables, never Rust's types ("expected u32", "expected struct FprParams").
pub fn plain_types(msg: &str) -> String {
    const WORDS: &[(&str, &str)] = &[
        ("expected u8", "expected an integer from 0 to 255"),
        ("expected u16", "expected an integer from 0 to 65535"),
        ("expected u32", "expected an integer from 0 to 4294967295"),
        ("expected u64", "expected an integer from 0 to 18446744073709551615"),
        ("expected usize", "expected an integer of 0 or more"),
        ("expected i8", "expected an integer"),
        ("expected i16", "expected an integer"),
        ("expected i32", "expected an integer"),
        ("expected i64", "expected an integer"),
        ("expected f32", "expected a number"),
        ("expected f64", "expected a number"),
        ("expected a sequence", "expected a list"),
        ("expected a map", "expected a table"),
        // serde's words for an enumeration written as a string (or a table for data variants).
        ("expected string or map", "expected a string"),
        ("expected option", "expected a value"),
        ("invalid type: map", "invalid type: a table"),
        ("invalid type: sequence", "invalid type: a list"),
        ("invalid type: unit value", "invalid type: an empty value"),
        ("invalid type: floating point", "invalid type: number"),
        ("invalid value: floating point", "invalid value: number"),
    ];
    let mut out = msg.to_owned();
    for (rust, plain) in WORDS {
        // Whole words only: "expected u32" but not a longer name that starts so.
        let mut from = 0;
        while let Some(i) = out[from..].find(rust).map(|i| i + from) {
            let end = i + rust.len();
            if out[end..].starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                from = end;
                continue;
            }
            out.replace_range(i..end, plain);
            from = i + plain.len();
        }
    }
    // "expected struct FprParams", "expected enum Tagging", "expected tuple struct X".
    for (rust, plain) in [("expected struct ", "expected a table"), ("expected tuple struct ", "expected a list"), ("expected enum ", "expected a string")] {
        while let Some(i) = out.find(rust) {
            let name_end = out[i + rust.len()..].find(|c: char| !(c.is_alphanumeric() || c == '_')).map_or(out.len(), |n| i + rust.len() + n);
            out.replace_range(i..name_end, plain);
        }
    }
    out
}

fn unknown_field(msg: &str) -> Option<&str> {
    let rest = msg.strip_prefix("unknown field `")?;
    rest.split_once('`').map(|(f, _)| f)
}
