//! A reader of protobuf text format, enough for Triton's `config.pbtxt`: fields `name: value`,
//! messages `name { ... }` (or `name: { ... }`, `name < ... >`), lists `name: [a, b]`, repeated
//! fields, quoted strings with escapes, enum names, `#` comments. It builds a tree without a schema;
//! `config.rs` maps the fields it knows. Nesting and size are bounded, so a hostile file cannot make
//! it recurse or allocate without limit.

/// Most bytes of a text file read.
pub const MAX_TEXT_BYTES: usize = 1 << 20;
/// Deepest nesting of messages and lists.
const MAX_DEPTH: usize = 32;

/// A value of a field.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A scalar: a number, an enum name, `true`/`false`, or a string (unquoted here).
    Scalar(String),
    /// A nested message.
    Message(Message),
    /// A list `[a, b]`.
    List(Vec<Value>),
}

/// A message: its fields in file order, repeated fields appearing once per occurrence.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Message {
    /// `(name, value)` in order.
    pub fields: Vec<(String, Value)>,
}

impl Message {
    /// Every value of field `name`, a list's items taken one by one.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.fields.iter().filter(move |(n, _)| n == name).flat_map(|(_, v)| match v {
            Value::List(items) => items.iter().collect::<Vec<_>>(),
            v => vec![v],
        })
    }

    /// The last value of field `name` (text format: a later singular value replaces an earlier).
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Str(String),
    Punct(char),
}

/// Parses `text` into its top-level message; an error names the line.
pub fn parse(text: &str) -> Result<Message, String> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(format!("{} bytes, above the limit of {MAX_TEXT_BYTES}", text.len()));
    }
    let tokens = tokenize(text)?;
    let mut parser = Parser { tokens, at: 0 };
    let message = parser.message(None, 0)?;
    Ok(message)
}

fn tokenize(text: &str) -> Result<Vec<(Token, usize)>, String> {
    let mut tokens = Vec::new();
    let mut chars = text.char_indices().peekable();
    let mut line = 1;
    while let Some(&(start, c)) = chars.peek() {
        match c {
            '\n' => {
                line += 1;
                chars.next();
            }
            c if c.is_whitespace() => {
                chars.next();
            }
            '#' => {
                while chars.peek().is_some_and(|&(_, c)| c != '\n') {
                    chars.next();
                }
            }
            '{' | '}' | '[' | ']' | ':' | ',' | ';' | '<' | '>' => {
                tokens.push((Token::Punct(c), line));
                chars.next();
            }
            '"' | '\'' => {
                chars.next();
                let mut s = String::new();
                loop {
                    match chars.next() {
                        None | Some((_, '\n')) => return Err(format!("line {line}: unterminated string")),
                        Some((_, q)) if q == c => break,
                        Some((_, '\\')) => match chars.next() {
                            Some((_, 'n')) => s.push('\n'),
                            Some((_, 't')) => s.push('\t'),
                            Some((_, e)) => s.push(e),
                            None => return Err(format!("line {line}: unterminated string")),
                        },
                        Some((_, ch)) => s.push(ch),
                    }
                }
                tokens.push((Token::Str(s), line));
            }
            c if c.is_ascii_alphanumeric() || "_.-+".contains(c) => {
                let mut end = start;
                while let Some(&(i, ch)) = chars.peek() {
                    if !(ch.is_ascii_alphanumeric() || "_.-+".contains(ch)) {
                        break;
                    }
                    end = i + ch.len_utf8();
                    chars.next();
                }
                tokens.push((Token::Word(text[start..end].to_string()), line));
            }
            c => return Err(format!("line {line}: unexpected character `{c}`")),
        }
    }
    Ok(tokens)
}

struct Parser {
    tokens: Vec<(Token, usize)>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at).map(|(t, _)| t)
    }

    fn line(&self) -> usize {
        self.tokens.get(self.at).or(self.tokens.last()).map_or(1, |(_, l)| *l)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.at).map(|(t, _)| t.clone());
        self.at += 1;
        t
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(&Token::Punct(c)) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    /// Fields until `close` (or the end of the text for the top level).
    fn message(&mut self, close: Option<char>, depth: usize) -> Result<Message, String> {
        if depth > MAX_DEPTH {
            return Err(format!("line {}: nested more than {MAX_DEPTH} deep", self.line()));
        }
        let mut message = Message::default();
        loop {
            match (self.peek(), close) {
                (None, None) => return Ok(message),
                (None, Some(c)) => return Err(format!("line {}: missing `{c}`", self.line())),
                (Some(Token::Punct(p)), Some(c)) if *p == c => {
                    self.at += 1;
                    return Ok(message);
                }
                _ => {}
            }
            let line = self.line();
            let name = match self.next() {
                Some(Token::Word(w)) => w,
                other => return Err(format!("line {line}: expected a field name, found {other:?}")),
            };
            let colon = self.eat(':');
            let value = self.value(colon, depth + 1)?;
            message.fields.push((name, value));
            if !self.eat(',') {
                self.eat(';');
            }
        }
    }

    fn value(&mut self, after_colon: bool, depth: usize) -> Result<Value, String> {
        let line = self.line();
        match self.next() {
            Some(Token::Punct('{')) => Ok(Value::Message(self.message(Some('}'), depth)?)),
            Some(Token::Punct('<')) => Ok(Value::Message(self.message(Some('>'), depth)?)),
            Some(Token::Punct('[')) => {
                let mut items = Vec::new();
                if self.eat(']') {
                    return Ok(Value::List(items));
                }
                loop {
                    items.push(self.value(true, depth + 1)?);
                    if self.eat(']') {
                        return Ok(Value::List(items));
                    }
                    if !self.eat(',') {
                        return Err(format!("line {}: expected `,` or `]` in a list", self.line()));
                    }
                }
            }
            Some(Token::Word(w)) if after_colon => Ok(Value::Scalar(w)),
            Some(Token::Str(s)) if after_colon => {
                // Adjacent strings concatenate, as in protobuf text format.
                let mut s = s;
                while let Some(Token::Str(more)) = self.peek().cloned() {
                    self.at += 1;
                    s.push_str(&more);
                }
                Ok(Value::Scalar(s))
            }
            other => Err(format!("line {line}: expected a value, found {other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRITON: &str = r#"
name: "bert"   # a comment
platform: "onnxruntime_onnx"
max_batch_size: 64
input [
  { name: "input_ids" data_type: TYPE_INT64 dims: [ 128 ] },
  { name: "attention_mask", data_type: TYPE_INT64, dims: [128] }
]
dynamic_batching { max_queue_delay_microseconds: 100 preferred_batch_size: [ 8, 16 ] }
instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0, 1 ] } ]
parameters { key: "buckets" value: { string_value: "list:1,2,4" } }
parameters: { key: "graphs" value < string_value: 'o' "n" > }
"#;

    #[test]
    fn a_triton_config_parses() {
        let m = parse(TRITON).unwrap();
        assert_eq!(m.get("name"), Some(&Value::Scalar("bert".into())));
        assert_eq!(m.get("max_batch_size"), Some(&Value::Scalar("64".into())));
        let inputs: Vec<_> = m.all("input").collect();
        assert_eq!(inputs.len(), 2);
        let Value::Message(first) = inputs[0] else { panic!() };
        assert_eq!(first.all("dims").collect::<Vec<_>>(), vec![&Value::Scalar("128".into())]);
        let Some(Value::Message(batching)) = m.get("dynamic_batching") else { panic!() };
        assert_eq!(batching.all("preferred_batch_size").count(), 2);
        assert_eq!(m.all("parameters").count(), 2);
        let Value::Message(p) = m.all("parameters").nth(1).unwrap() else { panic!() };
        let Some(Value::Message(v)) = p.get("value") else { panic!() };
        assert_eq!(v.get("string_value"), Some(&Value::Scalar("on".into())));
    }

    #[test]
    fn malformed_text_is_an_error_with_its_line() {
        for (bad, what) in [
            ("name: \"x", "unterminated"),
            ("a { b: 1", "missing `}`"),
            ("a: [1 2]", "expected `,`"),
            ("a: }", "expected a value"),
            ("a: 1 $", "unexpected character"),
            ("a", "expected a value"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(what) && e.starts_with("line "), "{bad}: {e}");
        }
        let deep = "a { ".repeat(100);
        assert!(parse(&deep).unwrap_err().contains("nested"));
        assert!(parse(&" ".repeat(MAX_TEXT_BYTES + 1)).is_err());
    }
}
