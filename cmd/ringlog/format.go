package main

// Output formats of `ringlog consume`: --format with kcat's placeholders, and --format
// json (one object per record per line).

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/client"
)

// formatJSON is the --format value that selects JSON lines.
const formatJSON = "json"

// Byte encodings of JSON keys, values and headers: UTF-8 text when the bytes are valid
// UTF-8, else standard base64. produce --input json reads both.
const (
	encodingUTF8   = "utf8"
	encodingBase64 = "base64"
)

// formatPart is one piece of a compiled --format: literal text, or a placeholder.
type formatPart struct {
	literal     string
	placeholder byte // 0 for a literal
}

// formatPlaceholders are kcat's: what each prints.
var formatPlaceholders = map[byte]string{
	't': "topic",
	'p': "partition",
	'o': "offset",
	'k': "key (nothing for a null key)",
	's': "value (nothing for a null value)",
	'K': "key length in bytes (-1 for a null key)",
	'S': "value length in bytes (-1 for a null value)",
	'T': "timestamp, milliseconds since the epoch",
	'h': "headers as k=v,k=v (a null header value prints as k)",
}

// formatEscapes are the backslash escapes --format understands.
var formatEscapes = map[byte]byte{'n': '\n', 'r': '\r', 't': '\t', '\\': '\\', '0': 0}

// compileFormat parses a kcat-style format: %t %p %o %k %s %K %S %T %h and %% for a
// percent sign; \n \r \t \\ and \0 escapes. Anything else after % or \ is an error.
func compileFormat(format string) ([]formatPart, error) {
	var parts []formatPart
	var literal strings.Builder
	flush := func() {
		if literal.Len() > 0 {
			parts = append(parts, formatPart{literal: literal.String()})
			literal.Reset()
		}
	}
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' && c != '\\' {
			literal.WriteByte(c)
			continue
		}
		if i+1 == len(format) {
			return nil, fmt.Errorf("--format %q: %c at the end", format, c)
		}
		i++
		next := format[i]
		switch {
		case c == '%' && next == '%':
			literal.WriteByte('%')
		case c == '%':
			if _, ok := formatPlaceholders[next]; !ok {
				return nil, fmt.Errorf("--format %q: unknown placeholder %%%c (want %%t %%p %%o %%k %%s %%K %%S %%T %%h or %%%%)", format, next)
			}
			flush()
			parts = append(parts, formatPart{placeholder: next})
		default:
			b, ok := formatEscapes[next]
			if !ok {
				return nil, fmt.Errorf("--format %q: unknown escape \\%c (want \\n \\r \\t \\\\ or \\0)", format, next)
			}
			literal.WriteByte(b)
		}
	}
	flush()
	return parts, nil
}

// writeFormatted writes r as the compiled format says (no newline unless it has one).
func writeFormatted(out *bufio.Writer, parts []formatPart, r *client.ConsumedRecord) {
	num := func(n int64) { out.Write(strconv.AppendInt(out.AvailableBuffer(), n, 10)) } // no allocation
	for _, p := range parts {
		switch p.placeholder {
		case 0:
			out.WriteString(p.literal)
		case 't':
			out.WriteString(r.Topic)
		case 'p':
			num(int64(r.Partition))
		case 'o':
			num(r.Offset)
		case 'k':
			out.Write(r.Key)
		case 's':
			out.Write(r.Value)
		case 'K':
			num(nullableLen(r.Key))
		case 'S':
			num(nullableLen(r.Value))
		case 'T':
			num(r.Timestamp.UnixMilli())
		case 'h':
			for i, h := range r.Headers {
				if i > 0 {
					out.WriteByte(',')
				}
				out.WriteString(h.Key)
				if h.Value != nil {
					out.WriteByte('=')
					out.Write(h.Value)
				}
			}
		}
	}
}

func nullableLen(b []byte) int64 {
	if b == nil {
		return -1
	}
	return int64(len(b))
}

// jsonRecord is one line of --format json, and of produce --input json.
type jsonRecord struct {
	Topic         string      `json:"topic,omitempty"`
	Partition     *int32      `json:"partition,omitempty"`
	Offset        *int64      `json:"offset,omitempty"`
	Timestamp     *int64      `json:"timestamp,omitempty"`
	Key           *string     `json:"key"`
	KeyEncoding   string      `json:"key_encoding,omitempty"`
	Value         *string     `json:"value"`
	ValueEncoding string      `json:"value_encoding,omitempty"`
	Headers       jsonHeaders `json:"headers"`
}

// jsonHeaders is a record's headers: a list of objects (what --format json prints;
// duplicate keys and order kept), or, on input, an object {"k": "v", ...} of UTF-8 values.
type jsonHeaders []jsonHeader

func (h *jsonHeaders) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return json.Unmarshal(data, (*[]jsonHeader)(h))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.Token() // {
	for dec.More() {
		token, err := dec.Token()
		if err != nil {
			return err
		}
		var value *string
		if err := dec.Decode(&value); err != nil {
			return fmt.Errorf("header %q: %w", token, err)
		}
		*h = append(*h, jsonHeader{Key: token.(string), Value: value})
	}
	_, err := dec.Token() // }
	return err
}

type jsonHeader struct {
	Key           string  `json:"key"`
	KeyEncoding   string  `json:"key_encoding,omitempty"` // only when the key is not UTF-8
	Value         *string `json:"value"`
	ValueEncoding string  `json:"value_encoding,omitempty"`
}

// encodeBytes returns b as JSON text and its encoding: nil stays null.
func encodeBytes(b []byte) (*string, string) {
	if b == nil {
		return nil, ""
	}
	if utf8.Valid(b) {
		s := string(b)
		return &s, encodingUTF8
	}
	s := base64.StdEncoding.EncodeToString(b)
	return &s, encodingBase64
}

// decodeBytes reverses encodeBytes ("" means utf8).
func decodeBytes(s *string, encoding, field string) ([]byte, error) {
	if s == nil {
		if encoding != "" {
			return nil, fmt.Errorf("%s_encoding %q for a null %s", field, encoding, field)
		}
		return nil, nil
	}
	switch encoding {
	case "", encodingUTF8:
		return []byte(*s), nil
	case encodingBase64:
		b, err := base64.StdEncoding.DecodeString(*s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("%s_encoding %q: want utf8 or base64", field, encoding)
}

func newJSONRecord(r *client.ConsumedRecord) jsonRecord {
	partition, offset, ts := r.Partition, r.Offset, r.Timestamp.UnixMilli()
	j := jsonRecord{Topic: r.Topic, Partition: &partition, Offset: &offset, Timestamp: &ts, Headers: jsonHeaders{}}
	j.Key, j.KeyEncoding = encodeBytes(r.Key)
	j.Value, j.ValueEncoding = encodeBytes(r.Value)
	for _, h := range r.Headers {
		jh := jsonHeader{Key: h.Key}
		if !utf8.ValidString(h.Key) {
			jh.Key, jh.KeyEncoding = base64.StdEncoding.EncodeToString([]byte(h.Key)), encodingBase64
		}
		jh.Value, jh.ValueEncoding = encodeBytes(h.Value)
		j.Headers = append(j.Headers, jh)
	}
	return j
}

// headersFromJSON decodes a record's headers.
func headersFromJSON(in []jsonHeader) ([]batch.RecordHeader, error) {
	var out []batch.RecordHeader
	for i, h := range in {
		key, err := decodeBytes(&h.Key, h.KeyEncoding, "key")
		if err != nil {
			return nil, fmt.Errorf("header %d: %w", i, err)
		}
		value, err := decodeBytes(h.Value, h.ValueEncoding, "value")
		if err != nil {
			return nil, fmt.Errorf("header %q: %w", key, err)
		}
		out = append(out, batch.RecordHeader{Key: string(key), Value: value})
	}
	return out, nil
}

// newJSONEncoder writes one compact object per line, without HTML escaping.
func newJSONEncoder(out *bufio.Writer) *json.Encoder {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	return enc
}

// plural is "1 member", "2 members".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
