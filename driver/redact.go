package driver

import (
	"net/url"
	"strings"
)

// Redacted replaces a password in what Redact, RedactText and RedactError
// return.
const Redacted = "xxxxx"

// Redact returns s, a connection string or a text that holds some (an
// error message, a log line), with every password replaced by Redacted,
// for logs, errors and output. It recognizes:
//
//   - the user information of a URL, anywhere in s:
//     "amqp://user:password@host/" becomes "amqp://user:xxxxx@host/"
//     (every URL of a list such as "nats://u:p@a:4222,nats://u:p@b:4222");
//   - a parameter whose name holds "pass", "pwd", "secret" or "token", in
//     a URL query ("?password=…&…") or as a keyword/value pair
//     ("host=db password=… user=app", "password='a b'");
//   - a go-sql-driver DSN, when s is one: "user:password@tcp(host:3306)/db".
//
// It reads s as text and never fails: a password written where none of
// these forms puts one stays. When the connection string is known, prefer
// RedactText or RedactError, which also find its password where a library
// echoed it in another form.
func Redact(s string) string {
	return cut(s, spans(s))
}

// RedactText returns text with every password that conns hold (as Redact
// finds them, whether written as in the connection string or unescaped)
// replaced by Redacted, and nothing else changed: it suits output that may
// show other URLs or parameters on purpose. A password of one character is
// replaced wherever that character appears: the text comes out harder to
// read, never with the secret.
func RedactText(text string, conns ...string) string {
	for _, p := range passwords(conns) {
		text = strings.ReplaceAll(text, p, Redacted)
	}
	return text
}

// RedactError returns err with its message passed through Redact and then
// RedactText for conns; Unwrap returns err, so errors.Is and errors.As see
// through it. It returns err itself when its message holds no password, and
// nil for nil.
func RedactError(err error, conns ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if red := RedactText(Redact(msg), conns...); red != msg {
		return &redactedError{msg: red, err: err}
	}
	return err
}

// redactedError is an error whose message had its passwords removed.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// passwords returns the passwords of conns, as written and unescaped,
// longest first so that a longer one is replaced before a part of it.
func passwords(conns []string) []string {
	var out []string
	add := func(p string) {
		if p != "" && p != Redacted {
			out = append(out, p)
		}
	}
	for _, c := range conns {
		for _, sp := range spans(c) {
			p := c[sp[0]:sp[1]]
			add(p)
			if u, err := url.PathUnescape(p); err == nil {
				add(u)
			}
			if u, err := url.QueryUnescape(p); err == nil {
				add(u)
			}
			if len(p) >= 2 && p[0] == '\'' && p[len(p)-1] == '\'' {
				add(strings.ReplaceAll(strings.ReplaceAll(p[1:len(p)-1], `\'`, `'`), `\\`, `\`))
			}
		}
	}
	for i := 1; i < len(out); i++ { // insertion sort, longest first: lists are short
		for j := i; j > 0 && len(out[j]) > len(out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// cut returns s with each span, in order, replaced by Redacted; spans that
// overlap are replaced as one.
func cut(s string, sp [][2]int) string {
	if len(sp) == 0 {
		return s
	}
	var b strings.Builder
	last := 0
	for _, x := range sp {
		if x[0] < last { // overlaps the previous span: extend it
			last = max(last, x[1])
			continue
		}
		b.WriteString(s[last:x[0]])
		b.WriteString(Redacted)
		last = x[1]
	}
	b.WriteString(s[last:])
	return b.String()
}

// spans returns where the passwords in s are, in order.
func spans(s string) [][2]int {
	var out [][2]int
	urls := false
	for i := 0; ; {
		j := strings.Index(s[i:], "://")
		if j < 0 {
			break
		}
		urls = true
		start := i + j + 3
		if p, ok := userinfoPassword(s, start); ok {
			out = append(out, p)
		}
		i = start
	}
	if !urls {
		if p, ok := mysqlPassword(s); ok {
			out = append(out, p)
		}
	}
	out = append(out, paramSpans(s)...)
	sortSpans(out)
	return out
}

// userinfoPassword finds the password of the URL whose authority starts
// at s[start:]: the text between the first ':' and the last '@' of the
// authority, which ends at the first '/', '?' or '#'. When that holds no
// '@', the last '@' before the next URL or the end of the word is taken
// (a password holding '/', '?' or '#' unescaped, which a URL parser
// misreads, is still found).
func userinfoPassword(s string, start int) ([2]int, bool) {
	rest := s[start:]
	end := strings.IndexAny(rest, " \t\r\n\"'`<>")
	if end < 0 {
		end = len(rest)
	}
	if next := strings.Index(rest[:end], "://"); next >= 0 {
		end = next // a list of URLs: the next one starts there
	}
	auth := rest[:end]
	if i := strings.IndexAny(auth, "/?#"); i >= 0 && strings.IndexByte(auth[:i], '@') >= 0 {
		auth = auth[:i]
	}
	p, ok := userPassword(auth)
	return [2]int{start + p[0], start + p[1]}, ok
}

// mysqlPassword finds the password of s when s is a go-sql-driver DSN,
// "user:password@net(addr)/db?params": the parser takes the last '@'
// before the last '/', and the password after the user's first ':'.
func mysqlPassword(s string) ([2]int, bool) {
	if strings.ContainsAny(s, " \t\r\n") {
		return [2]int{}, false
	}
	head := s
	if slash := strings.LastIndexByte(s, '/'); slash >= 0 {
		head = s[:slash]
	}
	return userPassword(head)
}

// userPassword finds the password of "user:password@rest": between the
// first ':' and the last '@' of s. A user without a password, or with an
// empty one, has none.
func userPassword(s string) ([2]int, bool) {
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return [2]int{}, false
	}
	colon := strings.IndexByte(s[:at], ':')
	if colon < 0 || colon+1 == at {
		return [2]int{}, false
	}
	return [2]int{colon + 1, at}, true
}

// paramSpans finds the values of secret parameters: "name=value" after
// '?', '&' or ';' (a URL query, value up to the next '&' or '#'), or at the
// start or after a space (a keyword/value DSN, value up to the next space,
// or quoted).
func paramSpans(s string) [][2]int {
	var out [][2]int
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			continue
		}
		k := i
		for k > 0 && s[k-1] == ' ' {
			k--
		}
		ke := k
		for k > 0 && isKeyByte(s[k-1]) {
			k--
		}
		if k == ke || !secretName(s[k:ke]) {
			continue
		}
		query := k > 0 && strings.IndexByte("?&;", s[k-1]) >= 0
		if !query && k > 0 && s[k-1] != ' ' && s[k-1] != '\t' && s[k-1] != '\n' && s[k-1] != '(' {
			continue
		}
		v := i + 1
		for !query && v < len(s) && s[v] == ' ' {
			v++
		}
		e := v
		switch {
		case query:
			for e < len(s) && s[e] != '&' && s[e] != '#' && s[e] != ' ' && s[e] != '\n' {
				e++
			}
		case v < len(s) && s[v] == '\'':
			e = v + 1
			for e < len(s) && s[e] != '\'' {
				if s[e] == '\\' {
					e++
				}
				e++
			}
			e = min(e+1, len(s))
		default:
			for e < len(s) && s[e] != ' ' && s[e] != '\t' && s[e] != '\n' {
				e++
			}
		}
		if e > v {
			out = append(out, [2]int{v, e})
		}
		i = e - 1
	}
	return out
}

func isKeyByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// secretName tells whether a parameter's name says it holds a secret.
func secretName(k string) bool {
	k = strings.ToLower(k)
	for _, w := range []string{"pass", "pwd", "secret", "token"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// sortSpans orders spans by start.
func sortSpans(sp [][2]int) {
	for i := 1; i < len(sp); i++ {
		for j := i; j > 0 && sp[j][0] < sp[j-1][0]; j-- {
			sp[j], sp[j-1] = sp[j-1], sp[j]
		}
	}
}
