package mcprelay

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// BenchmarkLargeAnswer relays the answer to a tools/call that read a
// 1 MiB file (its text twice, as server-filesystem sends it), without
// and with the filter.
func BenchmarkLargeAnswer(b *testing.B) {
	text := strings.Repeat(strings.Repeat("x", 63)+`\n`, 1<<14)
	answer := `{"result":{"content":[{"type":"text","text":"` + text + `"}],"structuredContent":{"content":"` + text + `"}},"jsonrpc":"2.0","id":1}` + "\n"
	for _, tc := range []struct {
		name string
		o    Options
	}{{"plain", Options{}}, {"filtered", secretOptions()}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(answer)))
			for b.Loop() {
				r := New(io.Discard, io.Discard, tc.o)
				_ = r.FromClient(strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_text_file","arguments":{"path":"/a"}}}` + "\n"))
				_ = r.FromServer(bytes.NewReader([]byte(answer)))
			}
		})
	}
}
