//! Label selectors in Kubernetes' string syntax, as List and Watch requests carry them:
//! `env=prod,tier!=db`, `tier in (web,api)`, `tier notin (db)`, `gpu`, `!legacy`.

use std::collections::BTreeMap;

use flotilla_core::affinity::label_selector_matches;
use flotilla_core::types::{LabelSelector, LabelSelectorRequirement, SelectorOperator};
use flotilla_core::validation::{FieldErrors, FieldPath, Limits, validate_label_selector};

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector(LabelSelector);

// === impl Selector ===

impl Selector {
    /// Parses `text` (Kubernetes `labels.Parse` syntax). Errors are reported at `field`.
    pub fn parse(text: &str, field: &str) -> Result<Self, FieldErrors> {
        let path = FieldPath::new(field);
        let invalid =
            |msg: String| vec![flotilla_core::validation::FieldError::invalid(&path, msg)];
        let mut selector = LabelSelector::default();
        for term in split_terms(text).map_err(invalid)? {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            selector
                .match_expressions
                .push(parse_term(term).map_err(invalid)?);
        }
        let errs = validate_label_selector(&selector, &path, &Limits::default());
        if errs.is_empty() {
            Ok(Selector(selector))
        } else {
            Err(errs)
        }
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        label_selector_matches(&self.0, labels)
    }

    /// Whether the selector has no requirement (matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.match_expressions.is_empty() && self.0.match_labels.is_empty()
    }
}

/// Splits at commas that are not inside parentheses.
fn split_terms(text: &str) -> Result<Vec<&str>, String> {
    let mut terms = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| format!("unbalanced ')' at position {i}"))?;
            }
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    terms.push(&text[start..]);
    Ok(terms)
}

fn requirement(
    key: &str,
    operator: SelectorOperator,
    values: Vec<String>,
) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.trim().to_owned(),
        operator,
        values,
    }
}

fn parse_term(term: &str) -> Result<LabelSelectorRequirement, String> {
    if let Some(key) = term.strip_prefix('!') {
        return Ok(requirement(key, SelectorOperator::DoesNotExist, vec![]));
    }
    if let Some((key, value)) = term.split_once("!=") {
        return Ok(requirement(
            key,
            SelectorOperator::NotIn,
            vec![value.trim().to_owned()],
        ));
    }
    if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(requirement(
            key,
            SelectorOperator::In,
            vec![value.trim().to_owned()],
        ));
    }
    if let Some(open) = term.find('(') {
        let head = term[..open].trim();
        let close = term
            .rfind(')')
            .filter(|c| *c > open && term[c + 1..].trim().is_empty())
            .ok_or_else(|| format!("{term:?}: expected a value set like (a,b)"))?;
        let values: Vec<String> = term[open + 1..close]
            .split(',')
            .map(|v| v.trim().to_owned())
            .collect();
        let (key, op) = head
            .rsplit_once(char::is_whitespace)
            .ok_or_else(|| format!("{term:?}: expected `key in (..)` or `key notin (..)`"))?;
        let operator = match op.trim() {
            "in" => SelectorOperator::In,
            "notin" => SelectorOperator::NotIn,
            other => return Err(format!("{term:?}: unknown operator {other:?}")),
        };
        return Ok(requirement(key, operator, values));
    }
    if term.contains(char::is_whitespace) {
        return Err(format!("{term:?}: unexpected whitespace"));
    }
    Ok(requirement(term, SelectorOperator::Exists, vec![]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn parses_and_matches_kubernetes_syntax() {
        let prod_web = labels(&[("env", "prod"), ("tier", "web")]);
        let dev_db = labels(&[("env", "dev"), ("tier", "db"), ("legacy", "1")]);
        let cases: &[(&str, bool, bool)] = &[
            ("", true, true),
            ("env=prod", true, false),
            ("env==prod", true, false),
            ("env!=prod", false, true),
            ("tier in (web, api)", true, false),
            ("tier notin (web)", false, true),
            ("legacy", false, true),
            ("!legacy", true, false),
            ("env=prod,tier in (web,api),!legacy", true, false),
            ("missing!=x", true, true),
        ];
        for (text, a, b) in cases {
            let s = Selector::parse(text, "labelSelector").unwrap();
            assert_eq!(s.matches(&prod_web), *a, "{text:?} on prod_web");
            assert_eq!(s.matches(&dev_db), *b, "{text:?} on dev_db");
        }
    }

    #[test]
    fn rejects_malformed_selectors_at_the_field() {
        for text in ["tier in (a", "tier foo (a)", "a b", "bad key!=x", "in (a)"] {
            let errs = Selector::parse(text, "labelSelector").unwrap_err();
            assert!(
                errs[0].field.starts_with("labelSelector"),
                "{text:?}: {errs:?}"
            );
        }
    }
}
