//! Built-in workload generators. Each produces the same event stream a trace reader does,
//! so the engine has one input path.

pub mod synthetic;
