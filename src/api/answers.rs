//! The small answers several routes share, typed: each serialises to exactly the JSON Nomad
//! answers (`{}`, `{"EvalID": ...}`, `{"VolumeID": ...}`).

use serde::Serialize;

/// `{}`: the answer of an allocation's restart or signal and of a garbage collection.
#[derive(Debug, Serialize)]
pub struct Empty {}

/// `{"EvalID": "<id>"}`: the evaluation a stop made.
#[derive(Debug, Serialize)]
pub struct EvalId {
    #[serde(rename = "EvalID")]
    pub eval_id: String,
}

/// `{"VolumeID": "<id>"}`: the full ID of the volume a deregister or a delete removed.
#[derive(Debug, Serialize)]
pub struct VolumeId {
    #[serde(rename = "VolumeID")]
    pub volume_id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json<T: Serialize>(answer: &T) -> String {
        serde_json::to_string(answer).unwrap()
    }

    #[test]
    fn each_serialises_as_nomad_answers() {
        assert_eq!(json(&Empty {}), "{}");
        let eval = EvalId {
            eval_id: "e1".into(),
        };
        assert_eq!(json(&eval), r#"{"EvalID":"e1"}"#);
        let volume = VolumeId {
            volume_id: "v1".into(),
        };
        assert_eq!(json(&volume), r#"{"VolumeID":"v1"}"#);
    }
}
