//! Table tests of the validation module, one file per rule family. Every row has a `name`;
//! every invalid row asserts the exact field paths and kinds it produces.

use super::{FieldErrorKind, FieldErrors};

mod binding;
mod cluster;
mod names;
mod placement;
mod policy;
mod prop;

/// Assert that `got` holds exactly the (field, kind) pairs of `want`, in any order.
fn assert_errs(case: &str, got: &FieldErrors, want: &[(&str, FieldErrorKind)]) {
    let key = |f: &str, k: FieldErrorKind| (f.to_owned(), k.as_str());
    let mut g: Vec<_> = got.iter().map(|e| key(&e.field, e.kind)).collect();
    let mut w: Vec<_> = want.iter().map(|(f, k)| key(f, *k)).collect();
    g.sort();
    w.sort();
    assert_eq!(g, w, "case {case:?}: got {got:#?}");
}
