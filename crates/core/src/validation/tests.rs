//! Table tests of the validation module, one file per rule family. Every row has a `name`;
//! every invalid row asserts the exact field paths and kinds it produces.

use super::{FieldErrorKind, FieldErrors};
use crate::types::ObjectMeta;

mod binding;
mod cluster;
mod names;
mod placement;
mod policy;
mod prop;

/// The (field, kind) pairs a case expects.
type Want = &'static [(&'static str, FieldErrorKind)];

/// One row of an edit table: `edit` applied to a valid object must give exactly `want`.
struct EditCase<T> {
    name: &'static str,
    edit: fn(&mut T),
    want: Want,
}

/// Run an edit table: the unedited `base()` must be valid, then each case edits a fresh
/// `base()` and checks what `validate` reports.
fn run_edits<T>(
    cases: impl IntoIterator<Item = EditCase<T>>,
    base: impl Fn() -> T,
    validate: impl Fn(&T) -> FieldErrors,
) {
    assert_errs("unedited", &validate(&base()), &[]);
    for c in cases {
        let mut value = base();
        (c.edit)(&mut value);
        assert_errs(c.name, &validate(&value), c.want);
    }
}

/// Give `meta` another name and namespace (the metadata rows of the edit tables).
fn rename(meta: &mut ObjectMeta, name: &str, namespace: &str) {
    meta.name = name.to_owned();
    meta.namespace = namespace.to_owned();
}

/// Assert that `got` holds exactly the (field, kind) pairs of `want`, in any order.
fn assert_errs(case: &str, got: &FieldErrors, want: &[(&str, FieldErrorKind)]) {
    let key = |f: &str, k: FieldErrorKind| (f.to_owned(), k.as_str());
    let mut g: Vec<_> = got.iter().map(|e| key(&e.field, e.kind)).collect();
    let mut w: Vec<_> = want.iter().map(|(f, k)| key(f, *k)).collect();
    g.sort();
    w.sort();
    assert_eq!(g, w, "case {case:?}: got {got:#?}");
}
