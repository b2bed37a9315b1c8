//! Declarative helpers for the runtime's own types (not exported).

/// Builder setters that only store their argument: `name(arg: Type);` becomes
/// `pub fn name(mut self, arg: Type) -> Self`, setting the field `name` (doc comments are kept).
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident($arg:ident: $ty:ty);)*) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, $arg: $ty) -> Self {
                self.$name = $arg;
                self
            }
        )*
    };
}

/// `impl Clone` for a handle `Type<P>` whose one field is shared (an `Arc`, a sender): a clone
/// shares it, and unlike `#[derive(Clone)]` it does not need `P: Clone`.
macro_rules! clone_handle {
    ($ty:ident<$param:ident> { $field:ident }) => {
        impl<$param> Clone for $ty<$param> {
            fn clone(&self) -> Self {
                Self {
                    $field: self.$field.clone(),
                }
            }
        }
    };
}
