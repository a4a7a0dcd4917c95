//! `crds`: the CRDs generated from our typed views, as one multi-document YAML stream that
//! `kubectl apply -f -` accepts.

use anyhow::Context as _;

use super::{Failure, write_stdout};
use crate::api::local_crds;

pub fn run() -> Result<(), Failure> {
    let yaml = render().context("cannot render the CRDs as YAML")?;
    write_stdout(&yaml)
}

pub fn render() -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string_multiple(&local_crds())
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// YAML has many ways to turn a string into something else (`on`, `1e3`, `null`); reading
    /// the output back must give exactly the CRDs we generated.
    #[test]
    fn the_yaml_reads_back_as_the_generated_crds() {
        let yaml = render().unwrap();
        let read_back: Vec<Value> = serde_saphyr::from_multiple(&yaml).unwrap();
        let expected: Vec<Value> = local_crds()
            .iter()
            .map(|crd| serde_json::to_value(crd).unwrap())
            .collect();
        assert_eq!(read_back, expected);
    }
}
