//! The DOT language, as far as a `cudaGraphDebugDotPrint` dump needs it: a tokenizer and a
//! parser of statements (nodes with attributes, edges, subgraphs, attribute statements). Both
//! are iterative, so no input can overflow the stack, and every error names its line.

use super::DotError;

/// A node statement: `"name" [key=value ...]`.
#[derive(Debug)]
pub(super) struct NodeStmt {
    pub name: String,
    pub attrs: Vec<(String, String)>,
    pub line: usize,
}

impl NodeStmt {
    /// The value of attribute `key`, the last one when it is given twice (as Graphviz does).
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// One edge `from -> to` (a chain `a -> b -> c` gives two).
#[derive(Debug)]
pub(super) struct EdgeStmt {
    pub from: String,
    pub to: String,
    pub line: usize,
}

/// A `subgraph cluster_X { ... }` block.
#[derive(Debug)]
pub(super) struct Cluster {
    pub name: String,
    pub line: usize,
}

/// The statements of a DOT file that the driver dump reader uses.
#[derive(Debug, Default)]
pub(super) struct DotFile {
    pub nodes: Vec<NodeStmt>,
    pub edges: Vec<EdgeStmt>,
    pub clusters: Vec<Cluster>,
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    /// An identifier, number, quoted string or HTML string; `quoted` when it was `"..."` or
    /// `<...>` (so it is never a keyword).
    Id {
        text: String,
        quoted: bool,
    },
    LBrace,
    RBrace,
    LBracket,
    RBracket,
    Eq,
    Semi,
    Comma,
    Colon,
    /// `->` or `--`.
    EdgeOp,
    Eof,
}

fn describe(tok: &Tok) -> String {
    match tok {
        Tok::Id { text, .. } => {
            let short: String = text.chars().take(40).collect();
            if short.len() < text.len() {
                format!("'{short}...'")
            } else {
                format!("'{short}'")
            }
        }
        Tok::LBrace => "'{'".into(),
        Tok::RBrace => "'}'".into(),
        Tok::LBracket => "'['".into(),
        Tok::RBracket => "']'".into(),
        Tok::Eq => "'='".into(),
        Tok::Semi => "';'".into(),
        Tok::Comma => "','".into(),
        Tok::Colon => "':'".into(),
        Tok::EdgeOp => "an edge operator".into(),
        Tok::Eof => "the end of the file".into(),
    }
}

/// Splits `text` into tokens with the line (from 1) each starts on.
fn tokenize(text: &str) -> Result<Vec<(Tok, usize)>, DotError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut line = 1usize;
    let mut i = 0usize;
    let mut line_start = true;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
            line_start = true;
            continue;
        }
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let start_line = line;
        // A line starting with '#' is C preprocessor output: Graphviz skips it.
        if c == '#' && line_start {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        line_start = false;
        let next = chars.get(i + 1).copied();
        match c {
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => {
                i += 2;
                loop {
                    match chars.get(i) {
                        None => {
                            return Err(DotError::Syntax {
                                line: start_line,
                                message: "unterminated /* comment".into(),
                            })
                        }
                        Some('*') if chars.get(i + 1) == Some(&'/') => {
                            i += 2;
                            break;
                        }
                        Some('\n') => {
                            line += 1;
                            i += 1;
                        }
                        Some(_) => i += 1,
                    }
                }
            }
            '{' | '}' | '[' | ']' | '=' | ';' | ',' | ':' => {
                out.push((
                    match c {
                        '{' => Tok::LBrace,
                        '}' => Tok::RBrace,
                        '[' => Tok::LBracket,
                        ']' => Tok::RBracket,
                        '=' => Tok::Eq,
                        ';' => Tok::Semi,
                        ',' => Tok::Comma,
                        _ => Tok::Colon,
                    },
                    start_line,
                ));
                i += 1;
            }
            '-' if next == Some('>') || next == Some('-') => {
                out.push((Tok::EdgeOp, start_line));
                i += 2;
            }
            '"' => {
                let mut s = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => {
                            return Err(DotError::Syntax {
                                line: start_line,
                                message: "unterminated quoted string".into(),
                            })
                        }
                        Some('"') => {
                            i += 1;
                            break;
                        }
                        Some('\\') => match chars.get(i + 1) {
                            Some('"') => {
                                s.push('"');
                                i += 2;
                            }
                            // A backslash before a line break continues the line.
                            Some('\n') => {
                                line += 1;
                                i += 2;
                            }
                            Some(&other) => {
                                s.push('\\');
                                s.push(other);
                                i += 2;
                            }
                            None => i += 1,
                        },
                        Some(&ch) => {
                            if ch == '\n' {
                                line += 1;
                            }
                            s.push(ch);
                            i += 1;
                        }
                    }
                }
                out.push((
                    Tok::Id {
                        text: s,
                        quoted: true,
                    },
                    start_line,
                ));
            }
            '<' => {
                // An HTML string: balanced angle brackets.
                let mut depth = 1usize;
                let mut s = String::new();
                i += 1;
                loop {
                    let Some(&ch) = chars.get(i) else {
                        return Err(DotError::Syntax {
                            line: start_line,
                            message: "unterminated <...> string".into(),
                        });
                    };
                    i += 1;
                    match ch {
                        '<' => depth += 1,
                        '>' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        '\n' => line += 1,
                        _ => {}
                    }
                    s.push(ch);
                }
                out.push((
                    Tok::Id {
                        text: s,
                        quoted: true,
                    },
                    start_line,
                ));
            }
            c if is_id_char(c) || c == '-' || c == '.' => {
                let mut s = String::new();
                s.push(c);
                i += 1;
                while let Some(&ch) = chars.get(i) {
                    if is_id_char(ch) || ch == '.' {
                        s.push(ch);
                        i += 1;
                    } else {
                        break;
                    }
                }
                out.push((
                    Tok::Id {
                        text: s,
                        quoted: false,
                    },
                    start_line,
                ));
            }
            other => {
                return Err(DotError::Syntax {
                    line: start_line,
                    message: format!("unexpected character {other:?}"),
                })
            }
        }
    }
    out.push((Tok::Eof, line));
    Ok(out)
}

fn is_id_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || !c.is_ascii() && !c.is_whitespace() && !c.is_control()
}

/// Reads the tokens in order.
struct Parser {
    toks: Vec<(Tok, usize)>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> &Tok {
        self.toks.get(self.at).map_or(&Tok::Eof, |(t, _)| t)
    }

    fn line(&self) -> usize {
        self.toks
            .get(self.at)
            .or_else(|| self.toks.last())
            .map_or(1, |(_, l)| *l)
    }

    fn next(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.at < self.toks.len() {
            self.at += 1;
        }
        t
    }

    fn error(&self, expected: &str) -> DotError {
        DotError::Syntax {
            line: self.line(),
            message: format!("expected {expected}, found {}", describe(self.peek())),
        }
    }

    fn keyword(&self, word: &str) -> bool {
        matches!(self.peek(), Tok::Id { text, quoted: false } if text.eq_ignore_ascii_case(word))
    }

    fn id(&mut self, expected: &str) -> Result<String, DotError> {
        match self.peek() {
            Tok::Id { text, .. } => {
                let text = text.clone();
                self.at += 1;
                Ok(text)
            }
            _ => Err(self.error(expected)),
        }
    }

    /// `[a=b, c=d] [e=f]`, or nothing.
    fn attr_lists(&mut self) -> Result<Vec<(String, String)>, DotError> {
        let mut attrs = Vec::new();
        while *self.peek() == Tok::LBracket {
            self.at += 1;
            loop {
                match self.peek() {
                    Tok::RBracket => {
                        self.at += 1;
                        break;
                    }
                    Tok::Comma | Tok::Semi => self.at += 1,
                    Tok::Id { .. } => {
                        let key = self.id("an attribute name")?;
                        let value = if *self.peek() == Tok::Eq {
                            self.at += 1;
                            self.id("an attribute value")?
                        } else {
                            "true".to_string()
                        };
                        attrs.push((key, value));
                    }
                    _ => return Err(self.error("an attribute or ']'")),
                }
            }
        }
        Ok(attrs)
    }

    /// A node id with an optional port (`name:port:compass`); the port is dropped.
    fn node_id(&mut self) -> Result<String, DotError> {
        let name = self.id("a node name")?;
        while *self.peek() == Tok::Colon {
            self.at += 1;
            self.id("a port name")?;
        }
        Ok(name)
    }
}

/// Parses the statements of a DOT file.
pub(super) fn parse(text: &str) -> Result<DotFile, DotError> {
    let mut p = Parser {
        toks: tokenize(text)?,
        at: 0,
    };
    let mut file = DotFile::default();
    if p.keyword("strict") {
        p.at += 1;
    }
    if !(p.keyword("digraph") || p.keyword("graph")) {
        return Err(p.error("'digraph'"));
    }
    p.at += 1;
    if matches!(p.peek(), Tok::Id { .. }) {
        p.at += 1;
    }
    if p.next() != Tok::LBrace {
        p.at = p.at.saturating_sub(1);
        return Err(p.error("'{'"));
    }
    // Open blocks (the graph and its subgraphs); statements are read until the last one closes.
    let mut depth = 1usize;
    while depth > 0 {
        let line = p.line();
        match p.peek().clone() {
            Tok::RBrace => {
                p.at += 1;
                depth -= 1;
            }
            Tok::Semi => p.at += 1,
            Tok::LBrace => {
                p.at += 1;
                depth += 1;
            }
            Tok::Id { .. } if p.keyword("subgraph") => {
                p.at += 1;
                if let Tok::Id { text, .. } = p.peek().clone() {
                    p.at += 1;
                    if text.starts_with("cluster") {
                        file.clusters.push(Cluster { name: text, line });
                    }
                }
                if *p.peek() == Tok::EdgeOp {
                    return Err(DotError::Syntax {
                        line,
                        message: "a subgraph as an edge end is not supported".into(),
                    });
                }
                if p.next() != Tok::LBrace {
                    p.at = p.at.saturating_sub(1);
                    return Err(p.error("'{' after subgraph"));
                }
                depth += 1;
            }
            Tok::Id { .. } if p.keyword("graph") || p.keyword("node") || p.keyword("edge") => {
                p.at += 1;
                if *p.peek() == Tok::Eq {
                    // `graph = x` is an assignment to an attribute named like the keyword.
                    p.at += 1;
                    p.id("a value")?;
                } else {
                    p.attr_lists()?;
                }
            }
            Tok::Id { .. } => {
                let name = p.node_id()?;
                if *p.peek() == Tok::Eq {
                    p.at += 1;
                    p.id("a value")?;
                    continue;
                }
                if *p.peek() == Tok::EdgeOp {
                    let mut ends = vec![name];
                    while *p.peek() == Tok::EdgeOp {
                        p.at += 1;
                        if *p.peek() == Tok::LBrace || p.keyword("subgraph") {
                            return Err(DotError::Syntax {
                                line: p.line(),
                                message: "a subgraph as an edge end is not supported".into(),
                            });
                        }
                        ends.push(p.node_id()?);
                    }
                    p.attr_lists()?;
                    for pair in ends.windows(2) {
                        file.edges.push(EdgeStmt {
                            from: pair[0].clone(),
                            to: pair[1].clone(),
                            line,
                        });
                    }
                } else {
                    let attrs = p.attr_lists()?;
                    file.nodes.push(NodeStmt { name, attrs, line });
                }
            }
            Tok::Eof => return Err(p.error("'}'")),
            _ => return Err(p.error("a statement")),
        }
    }
    if *p.peek() != Tok::Eof {
        return Err(p.error("the end of the file after the graph"));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_without_separators_and_multiline_strings() {
        let file = parse(
            "digraph dot {\nsubgraph cluster_1 {\nlabel=\"graph_1\" graph[style=\"dashed\"];\n\
             \"a\"[style=\"solid\" shape=\"x\"label=\"0\nMEMSET\n\"];\n\"a\" -> \"b\" -> c [headlabel=0];\n}\n}\n",
        )
        .unwrap();
        assert_eq!(file.clusters.len(), 1);
        assert_eq!(file.nodes[0].attr("label"), Some("0\nMEMSET\n"));
        assert_eq!(file.nodes[0].attr("shape"), Some("x"));
        assert_eq!(file.nodes[0].line, 4);
        assert_eq!(file.edges.len(), 2);
        assert_eq!(file.edges[1].line, 7);
    }

    #[test]
    fn errors_name_the_line() {
        let err = parse("digraph {\n a [label=\n]\n}").unwrap_err();
        assert_eq!(
            err.to_string(),
            "driver DOT, line 3: expected an attribute value, found ']'"
        );
        let err = parse("digraph {\n a [label=x\n -> b\n}").unwrap_err();
        assert_eq!(
            err.to_string(),
            "driver DOT, line 3: expected an attribute or ']', found an edge operator"
        );
        let err = parse("digraph {\n a [label=\"x]\n}\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "driver DOT, line 2: unterminated quoted string"
        );
        let err = parse("digraph {\n a\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "driver DOT, line 3: expected '}', found the end of the file"
        );
        let err = parse("hello").unwrap_err();
        assert_eq!(
            err.to_string(),
            "driver DOT, line 1: expected 'digraph', found 'hello'"
        );
    }
}
