//! [`text_enum!`]: one declaration for a closed vocabulary that is stored or shown as text —
//! the enum, `ALL`, `as_str`, `FromStr` (unknown text is an error, never a default variant) and
//! `Display`, `Serialize` as the text; [`text_enum_sql!`] adds the mapping to PostgreSQL `text` for sqlx. Each word is
//! written once, next to its variant, so the text and the parser cannot drift apart.

/// Text that names no value of a [`text_enum!`] vocabulary (cut to 40 characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a {what}")]
pub struct UnknownText {
    pub what: &'static str,
    pub text: String,
}

/// Declares an enum whose variants each carry their text:
///
/// ```ignore
/// text_enum! {
///     /// Docs for the enum.
///     #[derive(Debug, Clone, Copy, PartialEq, Eq)]
///     pub enum Colour: "colour" {
///         /// Docs for the variant.
///         Red = "red",
///         Green = "green",
///     }
/// }
/// ```
///
/// The string after the name is what [`UnknownText`] calls a value of it.
macro_rules! text_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident : $what:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: [$name; [$(stringify!($variant)),+].len()] = [$($name::$variant),+];

            /// The text it is stored and shown as.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::text_enum::UnknownText;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err($crate::text_enum::UnknownText {
                        what: $what,
                        text: s.chars().take(40).collect(),
                    }),
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
    };
}

/// Maps a [`text_enum!`] to PostgreSQL `text` for sqlx: bound as its text, read by its parser
/// (an unknown value is a decode error). Not the sqlx derive: that would declare a PostgreSQL
/// type of the enum's name and look its OID up at run time; this is the builtin `text`.
macro_rules! text_enum_sql {
    ($name:ident) => {
        impl ::sqlx::Type<::sqlx::Postgres> for $name {
            fn type_info() -> ::sqlx::postgres::PgTypeInfo {
                <&str as ::sqlx::Type<::sqlx::Postgres>>::type_info()
            }
            fn compatible(ty: &::sqlx::postgres::PgTypeInfo) -> bool {
                <&str as ::sqlx::Type<::sqlx::Postgres>>::compatible(ty)
            }
        }

        impl ::sqlx::postgres::PgHasArrayType for $name {
            fn array_type_info() -> ::sqlx::postgres::PgTypeInfo {
                <&str as ::sqlx::postgres::PgHasArrayType>::array_type_info()
            }
        }

        impl ::sqlx::Encode<'_, ::sqlx::Postgres> for $name {
            fn encode_by_ref(
                &self,
                buf: &mut ::sqlx::postgres::PgArgumentBuffer,
            ) -> Result<::sqlx::encode::IsNull, ::sqlx::error::BoxDynError> {
                <&str as ::sqlx::Encode<::sqlx::Postgres>>::encode(self.as_str(), buf)
            }
        }

        impl<'r> ::sqlx::Decode<'r, ::sqlx::Postgres> for $name {
            fn decode(
                value: ::sqlx::postgres::PgValueRef<'r>,
            ) -> Result<Self, ::sqlx::error::BoxDynError> {
                Ok(<&str as ::sqlx::Decode<::sqlx::Postgres>>::decode(value)?.parse()?)
            }
        }
    };
}

pub(crate) use {text_enum, text_enum_sql};

#[cfg(test)]
mod tests {
    text_enum! {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum Colour: "colour" {
            Red = "red",
            DarkGreen = "dark green",
        }
    }

    #[test]
    fn each_value_reads_back_from_its_text_and_unknown_text_is_an_error() {
        assert_eq!(Colour::ALL, [Colour::Red, Colour::DarkGreen]);
        for c in Colour::ALL {
            assert_eq!(c.as_str().parse::<Colour>(), Ok(c));
            assert_eq!(c.to_string(), c.as_str());
        }
        assert_eq!(Colour::DarkGreen.as_str(), "dark green");
        assert_eq!(serde_json::json!(Colour::DarkGreen), "dark green");
        let e = "Red".parse::<Colour>().unwrap_err();
        assert_eq!(e.to_string(), "\"Red\" is not a colour");
        let long = "x".repeat(100);
        assert_eq!(long.parse::<Colour>().unwrap_err().text.len(), 40);
    }
}
