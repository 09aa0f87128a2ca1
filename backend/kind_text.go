package backend

import (
	"fmt"
	"strconv"
)

// MarshalText encodes k for transports that carry the envelope in text
// headers: "" for the zero Kind, "command", "event" or "reply", and the
// number for any other value (so a newer kind survives an older relay).
func (k Kind) MarshalText() ([]byte, error) {
	switch k {
	case 0:
		return nil, nil
	case KindCommand, KindEvent, KindReply:
		return []byte(k.String()), nil
	}
	return strconv.AppendUint(nil, uint64(k), 10), nil
}

// UnmarshalText decodes what MarshalText produced.
func (k *Kind) UnmarshalText(text []byte) error {
	switch s := string(text); s {
	case "":
		*k = 0
	case "command":
		*k = KindCommand
	case "event":
		*k = KindEvent
	case "reply":
		*k = KindReply
	default:
		n, err := strconv.ParseUint(s, 10, 8)
		if err != nil {
			return fmt.Errorf("bus: unknown message kind %q", s)
		}
		*k = Kind(n)
	}
	return nil
}
