//! Tabular data from a file: a CSV parser (quoted fields, doubled quotes, CRLF, `;` and tab
//! delimiters) and JSON records (an array of objects, or JSON Lines), both into one `Table`
//! whose rows remember where in the file they came from, so errors can point there.

use serde_json::Value;

/// One cell as the file wrote it.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// An empty field or a JSON null.
    Empty,
    Text(String),
    /// A JSON number (CSV fields are always text until a column is read as numbers).
    Number(f64),
}

impl Cell {
    /// The cell as text, the way it appears in the file.
    pub fn text(&self) -> String {
        match self {
            Cell::Empty => String::new(),
            Cell::Text(t) => t.clone(),
            Cell::Number(n) => {
                if n.fract() == 0.0 && n.abs() < 1e15 {
                    format!("{}", *n as i64)
                } else {
                    n.to_string()
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Csv,
    Json,
}

#[derive(Debug, Clone)]
pub struct Row {
    pub cells: Vec<Cell>,
    /// CSV: the 1-based line the row starts on. JSON: the 1-based record number (or line,
    /// for JSON Lines).
    pub at: usize,
}

#[derive(Debug, Clone)]
pub struct Table {
    pub format: Format,
    pub columns: Vec<String>,
    pub rows: Vec<Row>,
}

impl Table {
    /// Where a row is, in the words an error message needs: `line 8` or `record 7`.
    pub fn place(&self, row: &Row) -> String {
        match self.format {
            Format::Csv => format!("line {}", row.at),
            Format::Json => format!("record {}", row.at),
        }
    }

    pub fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }
}

/// Parse a data file's text. `kind` is its extension in lower case.
pub fn parse(text: &str, kind: &str) -> Result<Table, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        return Err("is empty: it has no header and no rows".into());
    }
    match kind {
        "json" => parse_json(text),
        "jsonl" | "ndjson" => parse_json_lines(text),
        "tsv" | "tab" => parse_csv(text, '\t'),
        _ => parse_csv(text, sniff_delimiter(text)),
    }
}

/// A comma unless the header line has none and does have semicolons or tabs.
fn sniff_delimiter(text: &str) -> char {
    let header = text.lines().next().unwrap_or("");
    if header.contains(',') {
        ','
    } else if header.contains('\t') {
        '\t'
    } else if header.contains(';') {
        ';'
    } else {
        ','
    }
}

/// One record of a CSV file and the line it started on.
struct Record {
    fields: Vec<String>,
    line: usize,
}

/// Split CSV text into records (RFC 4180, plus LF or CR line ends and blank lines skipped).
fn records(text: &str, delim: char) -> Result<Vec<Record>, String> {
    let mut out = vec![];
    let mut fields: Vec<String> = vec![];
    let mut field = String::new();
    let mut line = 1;
    let mut start_line = 1;
    let mut quoted = false; // inside a quoted field
    let mut was_quoted = false; // the current field was quoted and has closed
    let mut quote_line = 0;
    let mut chars = text.chars().peekable();
    let mut end_record = |fields: &mut Vec<String>, field: &mut String, start: usize| {
        fields.push(std::mem::take(field));
        let blank = fields.len() == 1 && fields[0].trim().is_empty();
        let taken = std::mem::take(fields);
        if !blank {
            out.push(Record {
                fields: taken,
                line: start,
            });
        }
    };
    while let Some(c) = chars.next() {
        if quoted {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => {
                    quoted = false;
                    was_quoted = true;
                }
                '\r' if chars.peek() == Some(&'\n') => {}
                '\n' | '\r' => {
                    line += 1;
                    field.push('\n');
                }
                _ => field.push(c),
            }
            continue;
        }
        match c {
            c if c == delim => {
                fields.push(std::mem::take(&mut field));
                was_quoted = false;
            }
            '\r' | '\n' => {
                if c == '\r' && chars.peek() == Some(&'\n') {
                    chars.next();
                }
                end_record(&mut fields, &mut field, start_line);
                was_quoted = false;
                line += 1;
                start_line = line;
            }
            '"' if field.trim().is_empty() && !was_quoted => {
                field.clear();
                quoted = true;
                quote_line = line;
            }
            _ if was_quoted => {
                if c == ' ' || c == '\t' {
                    continue;
                }
                return Err(format!(
                    "line {line}: `{c}` follows the closing quote of field {}; a quote inside a \
                     quoted field must be doubled (\"\"), and a field ends at the delimiter",
                    fields.len() + 1
                ));
            }
            _ => field.push(c),
        }
    }
    if quoted {
        return Err(format!(
            "line {quote_line}: a quoted field opens here and its closing quote never comes \
             (the file ends inside it)"
        ));
    }
    if !field.is_empty() || !fields.is_empty() {
        end_record(&mut fields, &mut field, start_line);
    }
    Ok(out)
}

fn parse_csv(text: &str, delim: char) -> Result<Table, String> {
    let mut recs = records(text, delim)?.into_iter();
    let Some(header) = recs.next() else {
        return Err("is empty: it has no header and no rows".into());
    };
    let columns = header_names(header.fields.iter().map(|f| f.trim().to_string()))?;
    let mut rows = vec![];
    for rec in recs {
        if rec.fields.len() != columns.len() {
            let shown = if delim == '\t' {
                "tab".to_string()
            } else {
                format!("`{delim}`")
            };
            return Err(format!(
                "line {} has {} fields but the header (line {}) has {}; check for a missing or \
                 extra {shown} delimiter, or an unquoted field that contains one",
                rec.line,
                rec.fields.len(),
                header.line,
                columns.len()
            ));
        }
        let cells = rec
            .fields
            .into_iter()
            .map(|f| {
                if f.trim().is_empty() {
                    Cell::Empty
                } else {
                    Cell::Text(f)
                }
            })
            .collect();
        rows.push(Row {
            cells,
            at: rec.line,
        });
    }
    if rows.is_empty() {
        return Err("has a header but no data rows".into());
    }
    Ok(Table {
        format: Format::Csv,
        columns,
        rows,
    })
}

/// Header names, with blanks named the way pandas names them (`Unnamed: 0`, from
/// `to_csv` with its index) and duplicates refused.
fn header_names(names: impl Iterator<Item = String>) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = vec![];
    for (i, name) in names.enumerate() {
        let name = if name.is_empty() {
            format!("Unnamed: {i}")
        } else {
            name
        };
        if out.contains(&name) {
            return Err(format!(
                "names the column `{name}` twice in its header; column names must be unique"
            ));
        }
        out.push(name);
    }
    Ok(out)
}

fn parse_json(text: &str) -> Result<Table, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        format!("is not valid JSON ({e}); expected an array of records like [{{\"month\": \"2024-01\", \"sales\": 120}}]")
    })?;
    let records = match value {
        Value::Array(items) => items,
        Value::Object(map) => {
            // `{"data": [...]}`: one array of records inside an object.
            let mut arrays = map.into_iter().filter(|(_, v)| v.is_array());
            match (arrays.next(), arrays.next()) {
                (Some((_, Value::Array(items))), None) => items,
                _ => return Err(not_records()),
            }
        }
        _ => return Err(not_records()),
    };
    let objects = records.into_iter().enumerate().map(|(i, v)| (i + 1, v));
    table_from_objects(objects, "record")
}

fn parse_json_lines(text: &str) -> Result<Table, String> {
    let mut objects = vec![];
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line)
            .map_err(|e| format!("line {}: not valid JSON ({e})", i + 1))?;
        objects.push((i + 1, v));
    }
    table_from_objects(objects.into_iter(), "line")
}

fn not_records() -> String {
    "is JSON but not an array of records; write it as [{\"column\": value, ...}, ...] \
     (pandas: df.to_json(path, orient=\"records\"))"
        .into()
}

fn table_from_objects(
    objects: impl Iterator<Item = (usize, Value)>,
    unit: &str,
) -> Result<Table, String> {
    let mut columns: Vec<String> = vec![];
    let mut maps = vec![];
    for (at, v) in objects {
        let Value::Object(map) = v else {
            return Err(format!(
                "{unit} {at} is {}, not an object; each record must be {{\"column\": value, ...}}",
                crate::text::json_kind(&v)
            ));
        };
        for key in map.keys() {
            if !columns.contains(key) {
                columns.push(key.clone());
            }
        }
        maps.push((at, map));
    }
    if maps.is_empty() {
        return Err("holds no records".into());
    }
    let rows = maps
        .into_iter()
        .map(|(at, mut map)| Row {
            cells: columns
                .iter()
                .map(|c| match map.remove(c) {
                    None | Some(Value::Null) => Cell::Empty,
                    Some(Value::Number(n)) => n.as_f64().map_or(Cell::Empty, Cell::Number),
                    Some(Value::String(s)) if s.trim().is_empty() => Cell::Empty,
                    Some(Value::String(s)) => Cell::Text(s),
                    Some(other) => Cell::Text(other.to_string()),
                })
                .collect(),
            at,
        })
        .collect();
    Ok(Table {
        format: Format::Json,
        columns,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(t: &Table) -> Vec<Vec<String>> {
        t.rows
            .iter()
            .map(|r| r.cells.iter().map(Cell::text).collect())
            .collect()
    }

    #[test]
    fn csv_quotes_commas_crlf_and_newlines() {
        let t = parse(
            "name,note,amount\r\n\"Smith, J\",\"said \"\"hi\"\"\",10\r\nLee,\"two\nlines\",20\r\n\r\n",
            "csv",
        )
        .unwrap();
        assert_eq!(t.columns, ["name", "note", "amount"]);
        assert_eq!(
            texts(&t),
            [
                vec!["Smith, J", "said \"hi\"", "10"],
                vec!["Lee", "two\nlines", "20"]
            ]
        );
        assert_eq!(t.rows[0].at, 2);
        assert_eq!(t.rows[1].at, 3);
        // Last line without a newline, empty fields.
        let t = parse("a,b\n1,\n,2", "csv").unwrap();
        assert_eq!(t.rows[0].cells, [Cell::Text("1".into()), Cell::Empty]);
        assert_eq!(t.rows[1].at, 3);
    }

    #[test]
    fn csv_delimiters_and_header_names() {
        let t = parse("a;b\n1;2\n", "csv").unwrap();
        assert_eq!(t.columns, ["a", "b"]);
        let t = parse("a\tb\n1\t2\n", "tsv").unwrap();
        assert_eq!(texts(&t), [vec!["1", "2"]]);
        let t = parse(",x\n0,5\n", "csv").unwrap();
        assert_eq!(t.columns, ["Unnamed: 0", "x"]);
        let e = parse("x,x\n1,2\n", "csv").unwrap_err();
        assert!(e.contains("`x` twice"), "{e}");
    }

    #[test]
    fn csv_errors_name_the_line() {
        let e = parse("a,b\n1,2\n3,4,5\n", "csv").unwrap_err();
        assert!(
            e.starts_with("line 3 has 3 fields but the header (line 1) has 2"),
            "{e}"
        );
        let e = parse("a,b\n1,\"open\n2,3\n", "csv").unwrap_err();
        assert!(e.starts_with("line 2: a quoted field opens here"), "{e}");
        let e = parse("a,b\n1,\"x\"y\n", "csv").unwrap_err();
        assert!(
            e.starts_with("line 2: `y` follows the closing quote"),
            "{e}"
        );
        assert!(parse("", "csv").unwrap_err().contains("empty"));
        assert!(parse("\n\n", "csv").unwrap_err().contains("empty"));
        assert!(parse("a,b\n", "csv").unwrap_err().contains("no data rows"));
    }

    #[test]
    fn json_records_and_lines() {
        let t = parse(
            r#"[{"m": "2024-01", "v": 1.5}, {"m": "2024-02", "v": null, "w": true}]"#,
            "json",
        )
        .unwrap();
        assert_eq!(t.columns, ["m", "v", "w"]);
        assert_eq!(t.rows[0].cells[1], Cell::Number(1.5));
        assert_eq!(t.rows[1].cells[1], Cell::Empty);
        assert_eq!(t.rows[1].cells[2], Cell::Text("true".into()));
        assert_eq!(t.place(&t.rows[1]), "record 2");
        let t = parse(r#"{"data": [{"a": 1}]}"#, "json").unwrap();
        assert_eq!(t.columns, ["a"]);
        let t = parse("{\"a\": 1}\n\n{\"a\": 2}\n", "jsonl").unwrap();
        assert_eq!(t.rows[1].at, 3);
        assert!(
            parse("[1, 2]", "json")
                .unwrap_err()
                .contains("record 1 is a number")
        );
        assert!(parse("{\"a\": 1}", "json").unwrap_err().contains("orient"));
        assert!(parse("[]", "json").unwrap_err().contains("no records"));
        assert!(parse("[{", "json").unwrap_err().contains("not valid JSON"));
    }
}
