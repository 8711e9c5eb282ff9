//! One registry mechanism for every plug-in axis (docs/ARCHITECTURE.md "Axes"): coherence
//! policies, recycling schemes, page-table backends, hypervisor schedulers and machine
//! presets each register their implementations with [`registry!`], one line per entry,
//! and each implementation declares its own parameter table with [`params!`].
//!
//! What an axis gets from the macro: the names it accepts (`NAMES`), every entry's one-line
//! description and documented parameters (`entries()`, what `tlbsim list` and the
//! configuration reference print), the default of every entry's table (`default_params()`,
//! written out in config.json so a run can be repeated from it), a check of every table the
//! user gave (`check_tables`: names and keys, errors naming the key) and `visit`, which
//! hands the entry's type to the axis' own builder: monomorphised where the axis is on the
//! per-access path (coherence), a boxed trait object where it is called only at kernel
//! events.
//!
//! Parameters are parsed here ([`parse`]): the entry's defaults, overlaid with the user's
//! table, deserialised with unknown keys refused, and an error names the dotted key.

use crate::error::{Error, Result};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// One parameter of a plug-in, as the configuration reference prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamDoc {
    pub key: &'static str,
    /// What a user writes: "integer", "number", "boolean", "string", a list of those, or
    /// the allowed strings of an enumeration.
    pub kind: &'static str,
    /// The field's doc comment (the source of its default is said there).
    pub doc: &'static str,
}

/// A plug-in's parameter table: serde with defaults, unknown keys refused, documented.
/// Declared with [`params!`].
pub trait Params: Serialize + DeserializeOwned + Default {
    fn docs() -> &'static [ParamDoc];
}

/// How a parameter's type reads in the configuration reference (never a Rust type name).
pub trait ParamKind {
    const KIND: &'static str;
}

macro_rules! param_kinds {
    ($($kind:literal: $($ty:ty),*;)*) => { $($(impl ParamKind for $ty { const KIND: &'static str = $kind; })*)* };
}
param_kinds! {
    "integer": u8, u16, u32, u64, usize, i32, i64;
    "number": f32, f64;
    "boolean": bool;
    "string": String;
}
impl ParamKind for std::path::PathBuf {
    const KIND: &'static str = "path";
}
impl ParamKind for serde_json::Value {
    const KIND: &'static str = "table";
}
impl<T: ParamKind> ParamKind for Vec<T> {
    const KIND: &'static str = "list";
}
impl<T: ParamKind> ParamKind for Option<T> {
    const KIND: &'static str = T::KIND;
}

/// What a registry knows of one entry.
#[derive(Clone, Copy)]
pub struct Entry {
    pub name: &'static str,
    /// One line: what it is and the source it follows.
    pub summary: &'static str,
    /// Its parameter table with every default.
    pub defaults: fn() -> serde_json::Value,
    pub params: fn() -> &'static [ParamDoc],
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry").field("name", &self.name).field("summary", &self.summary).finish()
    }
}

/// An implementation registered on an axis: its parameter table.
pub trait Plugin {
    type Params: Params;
}

/// Parameters without any keys.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

impl Params for NoParams {
    fn docs() -> &'static [ParamDoc] {
        &[]
    }
}

/// Parse entry `name`'s table `[<table>.<name>]` (`value`; `None`: not given): the defaults
/// overlaid with what the user gave; errors name the dotted key.
pub fn parse<T: Params>(table: &str, name: &str, value: Option<&serde_json::Value>) -> Result<T> {
    let Some(v) = value else {
        return Ok(T::default());
    };
    let mut tree = serde_json::to_value(T::default()).unwrap_or(serde_json::Value::Null);
    if tree.is_object() && v.is_object() {
        crate::tree::merge(&mut tree, v.clone());
    } else {
        tree = v.clone();
    }
    serde_path_to_error::deserialize(tree).map_err(|e| {
        let path = e.path().to_string();
        let key = if path == "." || path.is_empty() { format!("{table}.{name}") } else { format!("{table}.{name}.{path}") };
        Error::config(key, crate::tree::plain_types(&e.into_inner().to_string()))
    })
}

/// `"a", "b", "c"`: the names an error lists.
pub fn quoted(names: &[&str]) -> String {
    names.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
}

/// Check that every table under `[<table>]` names a registered entry and parses.
pub fn check_tables(table: &str, names: &[&str], given: &serde_json::Map<String, serde_json::Value>, what: &str) -> Result<()> {
    for key in given.keys() {
        if !names.contains(&key.as_str()) {
            return Err(Error::config(format!("{table}.{key}"), format!("{key:?} is not {what}: use one of {}", quoted(names))));
        }
    }
    Ok(())
}

/// Declare a plug-in's parameter table: the struct (serde, every key defaulted, unknown
/// keys refused), its `Default` from the `= default` of each field, and its documentation
/// for the configuration reference. Doc comments of the fields are the documentation;
/// other attributes (`#[serde(...)]`) pass through.
///
/// ```ignore
/// tlbsim_core::params! {
///     /// `[coherence.latr]`.
///     pub struct LatrParams {
///         /// Cycles between two ticks (LATR §4.2: 1 ms at 3 GHz).
///         pub tick_cycles: u64 = 3_000_000,
///     }
/// }
/// ```
#[macro_export]
macro_rules! params {
    (
        $(#[$($sattr:tt)*])*
        $vis:vis struct $name:ident {
            $(
                $(#[$($fattr:tt)*])*
                $fvis:vis $field:ident : $ty:ty = $default:expr
            ),* $(,)?
        }
    ) => {
        $(#[$($sattr)*])*
        #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(default, deny_unknown_fields)]
        $vis struct $name {
            $( $(#[$($fattr)*])* $fvis $field: $ty, )*
        }

        impl Default for $name {
            fn default() -> Self {
                $name { $($field: $default),* }
            }
        }

        impl $crate::registry::Params for $name {
            fn docs() -> &'static [$crate::registry::ParamDoc] {
                &[$($crate::registry::ParamDoc {
                    key: stringify!($field),
                    kind: <$ty as $crate::registry::ParamKind>::KIND,
                    doc: concat!($($crate::__doc_line!($($fattr)*)),*),
                }),*]
            }
        }
    };
}

/// A doc attribute's text and a newline; nothing for any other attribute.
#[doc(hidden)]
#[macro_export]
macro_rules! __doc_line {
    (doc = $line:literal) => {
        concat!($line, "\n")
    };
    ($($other:tt)*) => {
        ""
    };
}

/// Declare an axis' registry, one line per entry: `"name" => Type, "one-line summary";`.
/// `Type` implements the axis' plug-in trait (`$bound`, which extends [`Plugin`]). Makes
/// `NAMES`, `entries()`, `default_params()`, `check_params(map)` and `visit(name, v)` with
/// its visitor trait `Visit`.
#[macro_export]
macro_rules! registry {
    (
        what: $what:literal, select: $select:literal, table: $table:literal, bound: $bound:path;
        $($name:literal => $ty:ty, $summary:literal;)*
    ) => {
        /// Names the axis accepts.
        pub const NAMES: &[&str] = &[$($name),*];

        /// Every entry with its summary and documented parameters.
        pub fn entries() -> Vec<$crate::registry::Entry> {
            vec![$($crate::registry::Entry {
                name: $name,
                summary: $summary,
                defaults: || serde_json::to_value(<<$ty as $crate::registry::Plugin>::Params as Default>::default()).expect("params serialize"),
                params: <<$ty as $crate::registry::Plugin>::Params as $crate::registry::Params>::docs,
            }),*]
        }

        /// Every entry's table with its defaults (config.json writes them all, so a run can
        /// be repeated from it).
        pub fn default_params() -> serde_json::Map<String, serde_json::Value> {
            let mut m = serde_json::Map::new();
            $(m.insert($name.into(), serde_json::to_value(<<$ty as $crate::registry::Plugin>::Params as Default>::default()).expect("params serialize"));)*
            m
        }

        /// Check every table of `given` (names and keys).
        pub fn check_params(given: &serde_json::Map<String, serde_json::Value>) -> $crate::error::Result<()> {
            $crate::registry::check_tables($table, NAMES, given, $what)?;
            $($crate::registry::parse::<<$ty as $crate::registry::Plugin>::Params>($table, $name, given.get($name))?;)*
            Ok(())
        }

        /// Check a selected name.
        pub fn check_name(name: &str) -> $crate::error::Result<()> {
            if NAMES.contains(&name) {
                Ok(())
            } else {
                Err(unknown(name))
            }
        }

        fn unknown(name: &str) -> $crate::error::Error {
            $crate::error::Error::config($select, format!("{name:?} is not {}: use one of {}", $what, $crate::registry::quoted(NAMES)))
        }

        /// A builder that receives the entry's type.
        pub trait Visit {
            type Output;
            fn visit<T: $bound>(self, name: &'static str) -> Self::Output;
        }

        /// Hand entry `name`'s type to `v`.
        pub fn visit<V: Visit>(name: &str, v: V) -> $crate::error::Result<V::Output> {
            match name {
                $($name => Ok(v.visit::<$ty>($name)),)*
                other => Err(unknown(other)),
            }
        }
    };
}
