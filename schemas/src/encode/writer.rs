//! The seam between the record structure and the record formats.
//!
//! The encoder writes each record (its framing, the envelope's fields, the `source` and
//! `transaction` blocks, message keys and values) once, generically over [`FormatWriter`];
//! [`super::json::JsonWriter`] and [`super::avro::AvroWriter`] say how each piece looks in
//! their format. [`AnyWriter`] holds the writer an encoder was built for, and
//! [`with_writer!`] is the one place that turns it into a concrete type.
//!
//! Invariants:
//! - dispatch is static: `with_writer!` runs once per encoder call, never per field or
//!   value, so each format gets its own monomorphised, inlinable copy of the shared code;
//! - a writer's methods append to the buffer and never truncate it (the encoder restores
//!   the buffer on error);
//! - the shared code calls [`FormatWriter::field`] before every struct field, in schema
//!   order, and [`FormatWriter::end_struct`] after the last, so formats that name fields
//!   (JSON) and formats that only order them (Avro) both see the struct's layout.

use crate::encode::connect::{ColumnPlan, Conv};
use crate::encode::convert::ValueError;
use crate::encode::hidden::Hidden;
use crate::value::{Row, Value};

/// What writing a value needs besides the value: the unavailable-value placeholder and
/// whether the format nests arrays a one-level array schema does not describe
/// (schemaless JSON has no schema to disagree with; JSON with schemas and Avro do).
#[derive(Clone, Copy)]
pub(crate) struct ValueCtx<'a> {
    pub placeholder: &'a str,
    pub nest_arrays: bool,
}

/// One struct field, as the text format needs it: the JSON key and what precedes it (the
/// struct's opening brace for the first field, a comma for the others). Built by
/// [`field!`] so the text is a compile-time constant: writing a key is one copy.
#[derive(Clone, Copy)]
pub(crate) struct Field {
    pub(crate) json: &'static [u8],
}

/// `field!(first "name")` opens a struct with its first field; `field!("name")` is any
/// later field.
macro_rules! field {
    (first $name:literal) => {
        $crate::encode::writer::Field {
            json: concat!("{\"", $name, "\":").as_bytes(),
        }
    };
    ($name:literal) => {
        $crate::encode::writer::Field {
            json: concat!(",\"", $name, "\":").as_bytes(),
        }
    };
}
pub(crate) use field;

/// The format frames records with a schema id and none was set.
pub(crate) struct IdsMissing;

/// How one record format writes the pieces of a record. See the module docs.
pub(crate) trait FormatWriter {
    /// Whether pieces that repeat from record to record are worth remembering (`memo.rs`):
    /// true where writing them means formatting numbers as text.
    const MEMOIZE: bool;

    /// Starts a key record; `id` is the registry id of the key schema, if set.
    fn open_key(&self, out: &mut Vec<u8>, id: Option<u32>) -> Result<(), IdsMissing>;
    fn close_key(&self, out: &mut Vec<u8>);
    /// Starts a value record; `id` is the registry id of the value schema, if set.
    fn open_value(&self, out: &mut Vec<u8>, id: Option<u32>) -> Result<(), IdsMissing>;
    fn close_value(&self, out: &mut Vec<u8>);

    fn field(&self, out: &mut Vec<u8>, f: Field);
    fn end_struct(&self, out: &mut Vec<u8>);
    /// Selects union branch `index` before a present value (untagged in JSON).
    fn branch(&self, out: &mut Vec<u8>, index: i64);
    /// A NULL in a `["null", T]` union.
    fn null(&self, out: &mut Vec<u8>);
    fn string(&self, out: &mut Vec<u8>, s: &str);
    /// A string from a fixed set the encoder owns (op codes, snapshot markers), none of
    /// which needs escaping in any format.
    fn symbol(&self, out: &mut Vec<u8>, s: &'static str);
    fn long(&self, out: &mut Vec<u8>, v: i64);
    /// Postgres's `source.sequence`: a string holding the JSON array of the commit LSN
    /// (`null` when 0: none yet) and the change's LSN, both as decimal strings.
    fn pg_sequence(&self, out: &mut Vec<u8>, commit_lsn: u64, lsn: u64);
    /// Starts an array of `len` items (Avro: one block of `len`, or nothing when empty).
    fn open_array(&self, out: &mut Vec<u8>, len: usize);
    /// Before item `index` of an array (JSON: the comma after the first).
    fn array_item(&self, out: &mut Vec<u8>, index: usize);
    /// Ends an array (Avro: the block terminator).
    fn close_array(&self, out: &mut Vec<u8>);
    /// The planned columns of `row` as a struct. A value the format cannot carry is
    /// reported to `hidden` and replaced by its stand-in, or (`fail` mode, or any other
    /// error) returned with the failing column.
    fn row<'p>(
        &self,
        out: &mut Vec<u8>,
        plans: &'p [ColumnPlan],
        row: &Row,
        placeholder: &str,
        hidden: &mut Hidden<'_>,
    ) -> Result<(), (&'p ColumnPlan, ValueError)>;
    /// One non-NULL value.
    fn value(
        &self,
        out: &mut Vec<u8>,
        conv: &Conv,
        v: &Value,
        placeholder: &str,
    ) -> Result<(), ValueError>;

    /// A `["null", string]` union.
    #[inline]
    fn opt_string(&self, out: &mut Vec<u8>, v: Option<&str>) {
        match v {
            Some(s) => {
                self.branch(out, 1);
                self.string(out, s);
            }
            None => self.null(out),
        }
    }

    /// A `["null", long]` union.
    #[inline]
    fn opt_long(&self, out: &mut Vec<u8>, v: Option<i64>) {
        match v {
            Some(i) => {
                self.branch(out, 1);
                self.long(out, i);
            }
            None => self.null(out),
        }
    }
}

/// The writer of the format an encoder was configured with.
pub(crate) enum AnyWriter {
    Json(super::json::JsonWriter),
    Avro(super::avro::AvroWriter),
}

/// `with_writer!(any, w => expr)`: evaluates `expr` with `w` bound to the concrete writer
/// inside `any` (an [`AnyWriter`]), once per format. The only match on the writer.
macro_rules! with_writer {
    ($any:expr, $w:ident => $body:expr) => {
        match &$any {
            $crate::encode::writer::AnyWriter::Json($w) => $body,
            $crate::encode::writer::AnyWriter::Avro($w) => $body,
        }
    };
}
pub(crate) use with_writer;
