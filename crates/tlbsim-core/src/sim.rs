//! The engine.
use crate::config::Config;
pub fn run(cfg: &Config) -> crate::Result<serde_json::Value> {
    let _ = cfg;
    todo!()
}
