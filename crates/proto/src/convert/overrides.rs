//! OverridePolicy and ClusterOverridePolicy (OV-1..OV-4): wire ↔ domain. A patch value
//! travels as JSON text (`valueJson`), which must parse.

use std::collections::BTreeMap;

use flotilla_core::overrides as domain;

use super::{ConvertError, list, msg, opt, to_wire};
use crate::v1;

fn operator_to_wire(op: domain::Operator) -> i32 {
    match op {
        domain::Operator::Add => v1::OverrideOperator::Add,
        domain::Operator::Remove => v1::OverrideOperator::Remove,
        domain::Operator::Replace => v1::OverrideOperator::Replace,
    }
    .into()
}

fn operator(raw: i32, field: &str) -> Result<domain::Operator, ConvertError> {
    match v1::OverrideOperator::try_from(raw) {
        Ok(v1::OverrideOperator::Add) => Ok(domain::Operator::Add),
        Ok(v1::OverrideOperator::Remove) => Ok(domain::Operator::Remove),
        Ok(v1::OverrideOperator::Replace) => Ok(domain::Operator::Replace),
        Ok(v1::OverrideOperator::Unspecified) => Err(ConvertError::new(
            field,
            "OverrideOperator must be set, not UNSPECIFIED",
        )),
        Err(_) => Err(ConvertError::new(
            field,
            format!("unknown OverrideOperator value {raw}"),
        )),
    }
}

impl From<domain::PatchOperation> for v1::PatchOperation {
    fn from(op: domain::PatchOperation) -> Self {
        let domain::PatchOperation {
            path,
            operator,
            value,
        } = op;
        v1::PatchOperation {
            path,
            operator: operator_to_wire(operator),
            value_json: value.map(|v| v.to_string()).unwrap_or_default(),
        }
    }
}

impl TryFrom<v1::PatchOperation> for domain::PatchOperation {
    type Error = ConvertError;

    fn try_from(op: v1::PatchOperation) -> Result<Self, ConvertError> {
        let v1::PatchOperation {
            path,
            operator: op,
            value_json,
        } = op;
        let value = if value_json.is_empty() {
            None
        } else {
            Some(
                serde_json::from_str(&value_json)
                    .map_err(|e| ConvertError::new("valueJson", format!("not JSON: {e}")))?,
            )
        };
        Ok(domain::PatchOperation {
            path,
            operator: operator(op, "operator")?,
            value,
        })
    }
}

impl From<domain::ImageOverrider> for v1::ImageOverrider {
    fn from(o: domain::ImageOverrider) -> Self {
        let domain::ImageOverrider {
            predicate_path,
            component,
            operator,
            value,
        } = o;
        v1::ImageOverrider {
            predicate_path: predicate_path.unwrap_or_default(),
            component: match component {
                domain::ImageComponent::Registry => v1::ImageComponent::Registry,
                domain::ImageComponent::Repository => v1::ImageComponent::Repository,
                domain::ImageComponent::Tag => v1::ImageComponent::Tag,
            }
            .into(),
            operator: operator_to_wire(operator),
            value,
        }
    }
}

impl TryFrom<v1::ImageOverrider> for domain::ImageOverrider {
    type Error = ConvertError;

    fn try_from(o: v1::ImageOverrider) -> Result<Self, ConvertError> {
        let v1::ImageOverrider {
            predicate_path,
            component,
            operator: op,
            value,
        } = o;
        let component = match v1::ImageComponent::try_from(component) {
            Ok(v1::ImageComponent::Registry) => domain::ImageComponent::Registry,
            Ok(v1::ImageComponent::Repository) => domain::ImageComponent::Repository,
            Ok(v1::ImageComponent::Tag) => domain::ImageComponent::Tag,
            _ => {
                return Err(ConvertError::new(
                    "component",
                    "ImageComponent must be REGISTRY, REPOSITORY or TAG",
                ));
            }
        };
        Ok(domain::ImageOverrider {
            predicate_path: (!predicate_path.is_empty()).then_some(predicate_path),
            component,
            operator: operator(op, "operator")?,
            value,
        })
    }
}

impl From<domain::CommandArgsOverrider> for v1::CommandArgsOverrider {
    fn from(o: domain::CommandArgsOverrider) -> Self {
        let domain::CommandArgsOverrider {
            container_name,
            operator,
            value,
        } = o;
        v1::CommandArgsOverrider {
            container_name,
            operator: operator_to_wire(operator),
            value,
        }
    }
}

impl TryFrom<v1::CommandArgsOverrider> for domain::CommandArgsOverrider {
    type Error = ConvertError;

    fn try_from(o: v1::CommandArgsOverrider) -> Result<Self, ConvertError> {
        let v1::CommandArgsOverrider {
            container_name,
            operator: op,
            value,
        } = o;
        Ok(domain::CommandArgsOverrider {
            container_name,
            operator: operator(op, "operator")?,
            value,
        })
    }
}

impl From<domain::MapOverrider> for v1::LabelAnnotationOverrider {
    fn from(o: domain::MapOverrider) -> Self {
        let domain::MapOverrider { operator, value } = o;
        v1::LabelAnnotationOverrider {
            operator: operator_to_wire(operator),
            value: value.into_iter().collect(),
        }
    }
}

impl TryFrom<v1::LabelAnnotationOverrider> for domain::MapOverrider {
    type Error = ConvertError;

    fn try_from(o: v1::LabelAnnotationOverrider) -> Result<Self, ConvertError> {
        let v1::LabelAnnotationOverrider {
            operator: op,
            value,
        } = o;
        Ok(domain::MapOverrider {
            operator: operator(op, "operator")?,
            value: value.into_iter().collect::<BTreeMap<_, _>>(),
        })
    }
}

impl From<domain::FieldOverrider> for v1::FieldOverrider {
    fn from(o: domain::FieldOverrider) -> Self {
        let domain::FieldOverrider {
            field_path,
            yaml,
            operations,
        } = o;
        v1::FieldOverrider {
            field_path,
            yaml,
            operations: to_wire(operations),
        }
    }
}

impl TryFrom<v1::FieldOverrider> for domain::FieldOverrider {
    type Error = ConvertError;

    fn try_from(o: v1::FieldOverrider) -> Result<Self, ConvertError> {
        let v1::FieldOverrider {
            field_path,
            yaml,
            operations,
        } = o;
        Ok(domain::FieldOverrider {
            field_path,
            yaml,
            operations: list(operations, "operations")?,
        })
    }
}

impl From<domain::Overriders> for v1::Overriders {
    fn from(o: domain::Overriders) -> Self {
        let domain::Overriders {
            plaintext,
            image,
            command,
            args,
            labels,
            annotations,
            field,
        } = o;
        v1::Overriders {
            plaintext: to_wire(plaintext),
            image_overrider: to_wire(image),
            command_overrider: to_wire(command),
            args_overrider: to_wire(args),
            labels_overrider: to_wire(labels),
            annotations_overrider: to_wire(annotations),
            field_overrider: to_wire(field),
        }
    }
}

impl TryFrom<v1::Overriders> for domain::Overriders {
    type Error = ConvertError;

    fn try_from(o: v1::Overriders) -> Result<Self, ConvertError> {
        let v1::Overriders {
            plaintext,
            image_overrider,
            command_overrider,
            args_overrider,
            labels_overrider,
            annotations_overrider,
            field_overrider,
        } = o;
        Ok(domain::Overriders {
            plaintext: list(plaintext, "plaintext")?,
            image: list(image_overrider, "imageOverrider")?,
            command: list(command_overrider, "commandOverrider")?,
            args: list(args_overrider, "argsOverrider")?,
            labels: list(labels_overrider, "labelsOverrider")?,
            annotations: list(annotations_overrider, "annotationsOverrider")?,
            field: list(field_overrider, "fieldOverrider")?,
        })
    }
}

impl From<domain::OverrideRule> for v1::OverrideRule {
    fn from(rule: domain::OverrideRule) -> Self {
        let domain::OverrideRule {
            target_cluster,
            overriders,
        } = rule;
        v1::OverrideRule {
            target_cluster: target_cluster.map(Into::into),
            overriders: Some(overriders.into()),
        }
    }
}

impl TryFrom<v1::OverrideRule> for domain::OverrideRule {
    type Error = ConvertError;

    fn try_from(rule: v1::OverrideRule) -> Result<Self, ConvertError> {
        let v1::OverrideRule {
            target_cluster,
            overriders,
        } = rule;
        Ok(domain::OverrideRule {
            target_cluster: opt(target_cluster, "targetCluster")?,
            overriders: msg(overriders, "overriders")?,
        })
    }
}

impl From<domain::OverrideSpec> for v1::OverrideSpec {
    fn from(spec: domain::OverrideSpec) -> Self {
        let domain::OverrideSpec {
            resource_selectors,
            override_rules,
        } = spec;
        v1::OverrideSpec {
            resource_selectors: to_wire(resource_selectors),
            override_rules: to_wire(override_rules),
        }
    }
}

impl TryFrom<v1::OverrideSpec> for domain::OverrideSpec {
    type Error = ConvertError;

    fn try_from(spec: v1::OverrideSpec) -> Result<Self, ConvertError> {
        let v1::OverrideSpec {
            resource_selectors,
            override_rules,
        } = spec;
        Ok(domain::OverrideSpec {
            resource_selectors: list(resource_selectors, "resourceSelectors")?,
            override_rules: list(override_rules, "overrideRules")?,
        })
    }
}

/// The two policy kinds share a shape: `From` and `TryFrom` for both.
macro_rules! override_policy {
    ($($kind:ident),*) => {$(
        impl From<domain::OverridePolicy> for v1::$kind {
            fn from(policy: domain::OverridePolicy) -> Self {
                let domain::OverridePolicy { meta, spec } = policy;
                v1::$kind {
                    metadata: Some(meta.into()),
                    spec: Some(spec.into()),
                }
            }
        }

        impl TryFrom<v1::$kind> for domain::OverridePolicy {
            type Error = ConvertError;

            fn try_from(policy: v1::$kind) -> Result<Self, ConvertError> {
                let v1::$kind { metadata, spec } = policy;
                Ok(domain::OverridePolicy {
                    meta: msg(metadata, "metadata")?,
                    spec: msg(spec, "spec")?,
                })
            }
        }
    )*};
}

override_policy!(OverridePolicy, ClusterOverridePolicy);
