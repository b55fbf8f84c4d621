package secrets

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
)

// redacted is what a Value prints instead of itself.
const redacted = "[redacted]"

// NewValue returns a Value holding a copy of b.
func NewValue(b []byte) Value {
	c := make([]byte, len(b))
	copy(c, b)
	p := &c
	return Value{b: &p}
}

// Bytes returns the real value (the caller must not modify it). It is nil
// for the zero Value.
func (v Value) Bytes() []byte {
	if v.b == nil {
		return nil
	}
	return **v.b
}

// Len is the value's length in bytes.
func (v Value) Len() int {
	return len(v.Bytes())
}

// String returns "[redacted]".
func (v Value) String() string {
	return redacted
}

// GoString returns "[redacted]", for %#v.
func (v Value) GoString() string {
	return redacted
}

// Format implements fmt.Formatter: every verb, with any flags, width or
// precision, prints "[redacted]".
func (v Value) Format(f fmt.State, verb rune) {
	_, _ = io.WriteString(f, redacted)
}

// LogValue implements slog.LogValuer: the attribute's value is
// "[redacted]".
func (v Value) LogValue() slog.Value {
	return slog.StringValue(redacted)
}

// MarshalJSON implements json.Marshaler: the JSON string "[redacted]".
func (v Value) MarshalJSON() ([]byte, error) {
	return []byte(`"` + redacted + `"`), nil
}

// MarshalText implements encoding.TextMarshaler: "[redacted]". Encoders
// that use it (encoding/xml, YAML encoders, slog's text handler) redact
// too.
func (v Value) MarshalText() ([]byte, error) {
	return []byte(redacted), nil
}

// UnmarshalJSON implements json.Unmarshaler: a JSON string becomes the
// value (how an API request carries it in); marshaling still redacts.
func (v *Value) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("secret value: want a JSON string")
	}
	*v = NewValue([]byte(s))
	return nil
}
