//! A tool's arguments as one typed contract. Each tool declares its arguments as a serde
//! type that also derives `JsonSchema`; from that one type this module derives the schema
//! the model sees ([`schema`]) and reads a call's JSON ([`parse`]), with errors that name the
//! argument and say what it must be, in the schema's own terms.
//!
//! The model-facing schema is a plain object: every subschema inline, no `$schema`, titles,
//! formats or defaults, and optional arguments are simply not required (no `null` type). An
//! internally tagged enum (`#[serde(tag = "action")]`) marked `#[schemars(transform =
//! args::flat_tagged)]` shows as one flat object, as models read best: the tag is a string
//! property listing every variant, and the variants' fields are its other properties. The
//! same type also gives [`variants`]: one alternative per variant, each with its own
//! required arguments, which a grammar can enforce where the flat object cannot.
//!
//! Knows nothing of any particular tool.

use schemars::generate::SchemaSettings;
use schemars::transform::{RecursiveTransform, Transform};
use schemars::{JsonSchema, Schema};
use serde::Deserialize;
use serde::de::{DeserializeOwned, Unexpected};
use serde_json::{Map, Value};
use serde_path_to_error::Segment;

use super::{ToolError, json_kind};

/// Where [`flat_tagged`] notes the tag's name, for [`parse`]'s messages; the model never sees it.
const TAG_MARK: &str = "x-tag";

/// Where [`flat_tagged`] keeps the variants' own schemas, for [`variants`].
const VARIANTS_MARK: &str = "x-variants";

/// The schema the model sees for the arguments `T`.
pub fn schema<T: JsonSchema>() -> Value {
    let mut full = contract::<T>();
    if let Some(obj) = full.as_object_mut() {
        obj.remove(TAG_MARK);
        obj.remove(VARIANTS_MARK);
        // The type's own doc comment is for the code; the tool's description is for the model.
        obj.remove("description");
    }
    full
}

/// For arguments `T` that are a tagged enum shown flat: `{"anyOf": [...]}`, one closed
/// object per variant with its tag's one value and its own required arguments, so that a
/// model held to it cannot send a variant without what that variant needs. `None` for any
/// other arguments.
pub fn variants<T: JsonSchema>() -> Option<Value> {
    let mut flat = contract::<T>();
    let Value::Array(mut each) = flat.as_object_mut()?.remove(VARIANTS_MARK)? else {
        return None;
    };
    // The fields of a struct the enum is flattened into (the editor's `path`) are every
    // variant's: the flat object's properties that no variant has.
    let in_a_variant = |key: &str| each.iter().any(|v| v["properties"].get(key).is_some());
    let outer: Vec<(String, Value, bool)> = flat["properties"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(key, _)| !in_a_variant(key))
        .map(|(key, field)| {
            let required = flat["required"]
                .as_array()
                .is_some_and(|r| r.contains(&key[..].into()));
            (key.clone(), field.clone(), required)
        })
        .collect();
    for variant in &mut each {
        let mut schema = Schema::try_from(std::mem::take(variant)).ok()?;
        RecursiveTransform(plain).transform(&mut schema);
        let mut closed = schema.to_value();
        let obj = closed.as_object_mut()?;
        obj.remove("description");
        for (key, field, required) in &outer {
            obj.entry("properties")
                .or_insert_with(|| Map::new().into())
                .as_object_mut()?
                .insert(key.clone(), field.clone());
            if *required {
                obj.entry("required")
                    .or_insert_with(|| Vec::<Value>::new().into())
                    .as_array_mut()?
                    .push(key[..].into());
            }
        }
        obj.insert("additionalProperties".into(), false.into());
        *variant = closed;
    }
    Some(serde_json::json!({"anyOf": each}))
}

/// Read a call's arguments as `T`. A value that does not fit comes back as an error that
/// names the argument and what it must be (`bash: argument `restart` must be a boolean
/// (true or false), got a string "yes"`), or the argument that is missing.
pub fn parse<T: DeserializeOwned + JsonSchema>(tool: &str, args: &Value) -> Result<T, ToolError> {
    serde_path_to_error::deserialize(args).map_err(|e| {
        let at = e.path().iter().filter_map(segment_key).collect();
        let why = explain(args, at, &e.into_inner().to_string(), &contract::<T>());
        ToolError::new(format!("{tool}: {why}"))
    })
}

/// A type whose values the model names by a fixed set of words, listed by the type itself
/// (`ChartType::NAMES`); [`Named`] makes it an argument.
pub trait Names: Sized {
    /// Every name, in the order the schema lists them.
    fn names() -> Vec<&'static str>;
    /// The value a name stands for (names may have aliases).
    fn parse(name: &str) -> Option<Self>;
}

/// An argument given by name: a string of [`Names::names`] in the schema, read with
/// surrounding blanks ignored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Named<T>(pub T);

impl<T: Names> JsonSchema for Named<T> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Named".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> Schema {
        schemars::json_schema!({"type": "string", "enum": T::names()})
    }
}

impl<'de, T: Names> Deserialize<'de> for Named<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        T::parse(name.trim()).map(Named).ok_or_else(|| {
            serde::de::Error::invalid_value(Unexpected::Str(&name), &"one of the names")
        })
    }
}

/// The type's schema with the tag mark still in it.
fn contract<T: JsonSchema>() -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.inline_subschemas = true;
    settings.meta_schema = None;
    settings
        .transforms
        .push(Box::new(RecursiveTransform(plain)));
    settings
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}

/// One subschema without what the model does not need: titles, formats, defaults, the
/// `null` that optional (`Option`) values add, and the line breaks of doc comments.
fn plain(schema: &mut Schema) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    for key in ["title", "format", "default"] {
        obj.remove(key);
    }
    if let Some(Value::String(text)) = obj.get_mut("description") {
        // A doc comment's line breaks are the source's, not the text's.
        let paragraphs: Vec<String> = text
            .split("\n\n")
            .map(|p| p.lines().collect::<Vec<_>>().join(" "))
            .collect();
        *text = paragraphs.join("\n\n");
    }
    let is_null = |v: &Value| v == "null" || v.get("type").is_some_and(|t| t == "null");
    if let Some(Value::Array(types)) = obj.get_mut("type") {
        types.retain(|t| !is_null(t));
        if let [one] = types.as_slice() {
            let one = one.clone();
            obj.insert("type".into(), one);
        }
    }
    if let Some(Value::Array(values)) = obj.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    for key in ["anyOf", "oneOf"] {
        let Some(Value::Array(alts)) = obj.get_mut(key) else {
            continue;
        };
        alts.retain(|a| !is_null(a));
        if let [one] = alts.as_slice()
            && let Value::Object(inner) = one.clone()
        {
            obj.remove(key);
            for (k, v) in inner {
                obj.entry(k).or_insert(v);
            }
        }
    }
}

/// For an internally tagged enum: its variants' object schemas become one flat object. The
/// tag is a string property with every variant's name, described by the enum's doc comment;
/// each field of a variant is a property (a field several variants share keeps the first
/// one's schema, and their distinct descriptions are joined, so describe a shared field once,
/// or say per variant what it is for); what every variant requires stays required. The
/// variants themselves are kept aside for [`variants`].
pub fn flat_tagged(schema: &mut Schema) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    let Some(Value::Array(variants)) = obj.remove("oneOf") else {
        return;
    };
    let props = |v: &Value| v.get("properties").and_then(Value::as_object).cloned();
    let Some(tag) = variants.first().and_then(props).and_then(|p| {
        p.iter()
            .find(|(_, s)| s.get("const").is_some())
            .map(|(k, _)| k.clone())
    }) else {
        return;
    };
    let mut names = vec![];
    let mut properties = Map::new();
    let mut required: Option<Vec<Value>> = None;
    for variant in &variants {
        for (key, field) in props(variant).unwrap_or_default() {
            if key == tag {
                names.extend(field.get("const").cloned());
                continue;
            }
            match properties.get_mut(&key) {
                None => {
                    properties.insert(key, field);
                }
                Some(known) => join_description(known, &field),
            }
        }
        let wants: Vec<Value> = variant
            .get("required")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        required = Some(match required {
            None => wants,
            Some(all) => all.into_iter().filter(|r| wants.contains(r)).collect(),
        });
    }
    let mut tag_schema = Map::new();
    tag_schema.insert("type".into(), "string".into());
    tag_schema.insert("enum".into(), names.into());
    if let Some(doc) = obj.remove("description") {
        tag_schema.insert("description".into(), doc);
    }
    properties.insert(tag.clone(), tag_schema.into());
    let mut required = required.unwrap_or_default();
    required.retain(|r| *r != tag.as_str());
    required.insert(0, tag.clone().into());
    obj.insert("type".into(), "object".into());
    obj.insert("properties".into(), properties.into());
    obj.insert("required".into(), required.into());
    obj.insert(TAG_MARK.into(), tag.into());
    obj.insert(VARIANTS_MARK.into(), variants.into());
}

/// Add `other`'s description to `known`'s when it says something new.
fn join_description(known: &mut Value, other: &Value) {
    let Some(more) = other.get("description").and_then(Value::as_str) else {
        return;
    };
    let Some(obj) = known.as_object_mut() else {
        return;
    };
    let text = match obj.get("description").and_then(Value::as_str) {
        None => more.to_string(),
        Some(have) if have.contains(more) => return,
        Some(have) => format!("{have} {more}"),
    };
    obj.insert("description".into(), text.into());
}

/// A step of an error's path, as the argument's name shows it.
fn segment_key(s: &Segment) -> Option<String> {
    match s {
        Segment::Map { key } => Some(key.clone()),
        Segment::Seq { index } => Some(format!("[{index}]")),
        Segment::Enum { .. } | Segment::Unknown => None,
    }
}

/// What was wrong with `args`, from serde's message `msg` at path `at`, in the terms of
/// `schema` (the arguments' contract).
fn explain(args: &Value, at: Vec<String>, msg: &str, schema: &Value) -> String {
    let tag = schema.get(TAG_MARK).and_then(Value::as_str);
    let tag_value = tag.and_then(|t| args.get(t)).and_then(Value::as_str);
    if let Some(field) = quoted_after(msg, "missing field `") {
        let name = shown_path(&at, Some(field));
        let mut text = format!("missing required argument `{name}`");
        match (tag, tag_value) {
            (Some(t), _) if t == field => {
                text += &format!("; one of: {}", choices(property(schema, t)))
            }
            (Some(t), Some(v)) if at.is_empty() => {
                let what = must(property(schema, field));
                text += &format!("; {t} `{v}` needs `{field}`, {what}");
            }
            _ => {}
        }
        return text;
    }
    let standard = [
        "invalid type: ",
        "invalid value: ",
        "invalid length ",
        "unknown variant `",
        "data did not match any variant of untagged enum",
    ];
    if !standard.iter().any(|p| msg.starts_with(p)) {
        // A field's own reader said, naming the field, what it must be.
        return msg.to_string();
    }
    // Inside a tagged enum serde loses the path: find the argument that does not fit.
    let at = if at.is_empty() {
        misfit(args, schema)
    } else {
        Some(at)
    };
    let Some(at) = at.filter(|a| !a.is_empty()) else {
        return format!("the arguments do not fit the schema: {msg}");
    };
    let name = shown_path(&at, None);
    let wanted = schema_at(schema, &at);
    let given = value_at(args, &at);
    if let (Some(Value::String(word)), Some(wanted)) = (given, wanted)
        && wanted.get("enum").is_some()
    {
        return format!("unknown {name} `{word}`; one of: {}", choices(Some(wanted)));
    }
    let got = given.map_or("nothing".into(), shown);
    format!("argument `{name}` must be {}, got {got}", must(wanted))
}

/// The text between `prefix` and the next backtick, when `msg` starts with `prefix`.
fn quoted_after<'a>(msg: &'a str, prefix: &str) -> Option<&'a str> {
    msg.strip_prefix(prefix)?.split('`').next()
}

/// `sections[0].heading` from its steps.
fn shown_path(at: &[String], last: Option<&str>) -> String {
    let mut out = String::new();
    for step in at.iter().map(String::as_str).chain(last) {
        if !out.is_empty() && !step.starts_with('[') {
            out.push('.');
        }
        out.push_str(step);
    }
    out
}

fn property<'a>(schema: &'a Value, key: &str) -> Option<&'a Value> {
    schema.get("properties")?.get(key)
}

/// The subschema at a path of property names and `[i]` indexes.
fn schema_at<'a>(schema: &'a Value, at: &[String]) -> Option<&'a Value> {
    at.iter().try_fold(schema, |s, step| {
        if step.starts_with('[') {
            s.get("items")
        } else {
            property(s, step).or_else(|| {
                // A step into one of several shapes (`{path, caption}` or a string).
                s.get("anyOf")?
                    .as_array()?
                    .iter()
                    .find_map(|alt| property(alt, step))
            })
        }
    })
}

fn value_at<'a>(args: &'a Value, at: &[String]) -> Option<&'a Value> {
    at.iter()
        .try_fold(args, |v, step| match step.strip_prefix('[') {
            Some(i) => v.get(i.trim_end_matches(']').parse::<usize>().ok()?),
            None => v.get(step),
        })
}

/// The path (from `value`) of the first part of `value` that `schema` does not allow; empty
/// when it is `value` itself, `None` when everything fits.
fn misfit(value: &Value, schema: &Value) -> Option<Vec<String>> {
    if !fits(value, schema) {
        return Some(vec![]);
    }
    let within = |step: String, v: &Value, s: &Value| {
        misfit(v, s).map(|mut rest| {
            rest.insert(0, step);
            rest
        })
    };
    match value {
        Value::Object(fields) => fields.iter().find_map(|(k, v)| {
            let s = property(schema, k)?;
            within(k.clone(), v, s)
        }),
        Value::Array(items) => {
            let s = schema.get("items")?;
            items
                .iter()
                .enumerate()
                .find_map(|(i, v)| within(format!("[{i}]"), v, s))
        }
        _ => None,
    }
}

/// Whether `value` has the type, choice and bounds `schema` asks for (not looking inside).
fn fits(value: &Value, schema: &Value) -> bool {
    if let Some(Value::Array(alts)) = schema.get("anyOf") {
        return alts.iter().any(|a| misfit(value, a).is_none());
    }
    if let Some(Value::Array(allowed)) = schema.get("enum")
        && !allowed.contains(value)
    {
        return false;
    }
    let bound = |key: &str| schema.get(key).and_then(Value::as_f64);
    if let Some(n) = value.as_f64()
        && (bound("minimum").is_some_and(|m| n < m) || bound("maximum").is_some_and(|m| n > m))
    {
        return false;
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        Some("array") => value.is_array(),
        Some("object") => value.is_object(),
        _ => true,
    }
}

/// What a value of `schema` must be, in words.
fn must(schema: Option<&Value>) -> String {
    let Some(schema) = schema else {
        return "something else".into();
    };
    if schema.get("enum").is_some() {
        return format!("one of {}", choices(Some(schema)));
    }
    if let Some(Value::Array(alts)) = schema.get("anyOf") {
        let each: Vec<String> = alts.iter().map(|a| must(Some(a))).collect();
        return each.join(" or ");
    }
    let bound = |key: &str| schema.get(key).map(Value::to_string);
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => "a string".into(),
        Some("boolean") => "a boolean (true or false)".into(),
        Some("number") => "a number".into(),
        Some("integer") => match (bound("minimum"), bound("maximum")) {
            (Some(lo), Some(hi)) => format!("a whole number from {lo} to {hi}"),
            (Some(lo), None) => format!("a whole number of {lo} or more"),
            (None, Some(hi)) => format!("a whole number of {hi} or less"),
            (None, None) => "a whole number".into(),
        },
        Some("array") => {
            let items = schema.get("items").map(|i| must(Some(i)));
            match items.as_deref().map(|i| i.strip_prefix("a ").unwrap_or(i)) {
                Some("whole number") => "an array of whole numbers".into(),
                Some("string") => "an array of strings".into(),
                Some(other) => format!("an array, each item {other}"),
                None => "an array".into(),
            }
        }
        Some("object") => "an object".into(),
        _ => "something else".into(),
    }
}

/// The allowed values of an enum schema, listed.
fn choices(schema: Option<&Value>) -> String {
    let names: Vec<String> = schema
        .and_then(|s| s.get("enum"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
        .collect();
    names.join(", ")
}

/// A short rendering of a value that does not fit.
fn shown(v: &Value) -> String {
    let kind = json_kind(v);
    let text = v.to_string();
    if v.is_null() || text.len() > 60 {
        kind.to_string()
    } else {
        format!("{kind} {text}")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Not shown to the model.
    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    struct Plain {
        /// The name.
        name: String,
        /// How many.
        count: Option<i64>,
        /// Whether to.
        #[serde(default)]
        flag: bool,
        /// Some numbers.
        nums: Option<Vec<i64>>,
    }

    /// What to do.
    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    #[serde(tag = "op", rename_all = "snake_case")]
    #[schemars(transform = flat_tagged)]
    enum Tagged {
        Open {
            /// For open and close: the door.
            door: String,
        },
        Wait {
            /// For wait: seconds.
            secs: Option<i64>,
            /// For wait: the door to watch.
            door: Option<String>,
        },
        Close {
            door: String,
        },
    }

    #[test]
    fn a_struct_is_a_plain_object_schema() {
        assert_eq!(
            schema::<Plain>(),
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "The name."},
                    "count": {"type": "integer", "description": "How many."},
                    "flag": {"type": "boolean", "description": "Whether to."},
                    "nums": {"type": "array", "items": {"type": "integer"}, "description": "Some numbers."}
                },
                "required": ["name"]
            })
        );
    }

    #[test]
    fn a_tagged_enum_is_one_flat_object() {
        assert_eq!(
            schema::<Tagged>(),
            json!({
                "type": "object",
                "properties": {
                    "op": {"type": "string", "enum": ["open", "wait", "close"], "description": "What to do."},
                    "door": {"type": "string", "description": "For open and close: the door. For wait: the door to watch."},
                    "secs": {"type": "integer", "description": "For wait: seconds."}
                },
                "required": ["op"]
            })
        );
    }

    /// A tagged enum flattened into a struct with fields of its own.
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Outer {
        #[serde(flatten)]
        op: Tagged,
        /// Which house.
        house: String,
        /// How loudly.
        volume: Option<i64>,
    }

    #[test]
    fn a_flattened_tagged_enum_gives_each_variant_the_structs_own_fields() {
        let variants = variants::<Outer>().unwrap();
        let each = variants["anyOf"].as_array().unwrap();
        assert_eq!(each.len(), 3);
        for v in each {
            assert_eq!(v["properties"]["house"]["type"], "string", "{v}");
            assert_eq!(v["properties"]["volume"]["type"], "integer", "{v}");
            let required = v["required"].as_array().unwrap();
            assert!(required.contains(&"house".into()), "{v}");
            assert!(!required.contains(&"volume".into()), "{v}");
        }
        assert_eq!(each[0]["required"], json!(["op", "door", "house"]));
        assert_eq!(each[1]["properties"].as_object().unwrap().len(), 5);
    }

    #[test]
    fn a_tagged_enum_has_one_closed_alternative_per_variant() {
        assert_eq!(variants::<Plain>(), None);
        let door = |about: &str| json!({"type": "string", "description": about});
        assert_eq!(
            variants::<Tagged>().unwrap(),
            json!({"anyOf": [
                {
                    "type": "object",
                    "properties": {
                        "op": {"type": "string", "const": "open"},
                        "door": door("For open and close: the door.")
                    },
                    "required": ["op", "door"],
                    "additionalProperties": false
                },
                {
                    "type": "object",
                    "properties": {
                        "op": {"type": "string", "const": "wait"},
                        "secs": {"type": "integer", "description": "For wait: seconds."},
                        "door": door("For wait: the door to watch.")
                    },
                    "required": ["op"],
                    "additionalProperties": false
                },
                {
                    "type": "object",
                    "properties": {"op": {"type": "string", "const": "close"}, "door": {"type": "string"}},
                    "required": ["op", "door"],
                    "additionalProperties": false
                }
            ]})
        );
    }

    fn err<T: DeserializeOwned + JsonSchema + std::fmt::Debug>(args: Value) -> String {
        parse::<T>("t", &args).unwrap_err().0
    }

    #[test]
    fn errors_name_the_argument_and_what_it_must_be() {
        assert_eq!(
            parse::<Plain>("t", &json!({"name": "n", "count": null, "nums": [1]})).unwrap(),
            Plain {
                name: "n".into(),
                count: None,
                flag: false,
                nums: Some(vec![1])
            }
        );
        assert_eq!(
            err::<Plain>(json!({})),
            "t: missing required argument `name`"
        );
        assert_eq!(
            err::<Plain>(json!({"name": 3})),
            "t: argument `name` must be a string, got a number 3"
        );
        assert_eq!(
            err::<Plain>(json!({"name": "n", "flag": "yes"})),
            "t: argument `flag` must be a boolean (true or false), got a string \"yes\""
        );
        assert_eq!(
            err::<Plain>(json!({"name": "n", "nums": [1, "x"]})),
            "t: argument `nums[1]` must be a whole number, got a string \"x\""
        );
        assert_eq!(
            parse::<Tagged>("t", &json!({"op": "wait", "secs": null})).unwrap(),
            Tagged::Wait {
                secs: None,
                door: None
            }
        );
        assert_eq!(
            err::<Tagged>(json!({})),
            "t: missing required argument `op`; one of: open, wait, close"
        );
        assert_eq!(
            err::<Tagged>(json!({"op": "fly"})),
            "t: unknown op `fly`; one of: open, wait, close"
        );
        assert_eq!(
            err::<Tagged>(json!({"op": "close"})),
            "t: missing required argument `door`; op `close` needs `door`, a string"
        );
        assert_eq!(
            err::<Tagged>(json!({"op": "wait", "secs": 1.5})),
            "t: argument `secs` must be a whole number, got a number 1.5"
        );
    }
}
