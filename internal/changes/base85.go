package changes

import (
	"bytes"
	"compress/zlib"
	"fmt"
	"io"
)

// base85 is git's alphabet for binary patches (base85.c), not Ascii85's.
const base85 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"

// writeLiteral writes a "literal" hunk of a git binary patch: data's
// size, then data deflated with zlib in lines of up to 52 bytes, each
// led by its length ('A' for 1 … 'Z' for 26, 'a' for 27 … 'z' for 52) and
// encoded in git's base85, four bytes to five characters.
func writeLiteral(w io.Writer, data []byte) {
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.BestCompression)
	zw.Write(data)
	zw.Close()
	fmt.Fprintf(w, "literal %d\n", len(data))
	buf := z.Bytes()
	line := make([]byte, 0, 1+52/4*5+1)
	for len(buf) > 0 {
		n := min(len(buf), 52)
		chunk := buf[:n]
		buf = buf[n:]
		line = line[:0]
		if n <= 26 {
			line = append(line, byte('A'+n-1))
		} else {
			line = append(line, byte('a'+n-27))
		}
		for len(chunk) > 0 {
			var v uint32
			for i := range 4 {
				v <<= 8
				if i < len(chunk) {
					v |= uint32(chunk[i])
				}
			}
			chunk = chunk[min(4, len(chunk)):]
			var enc [5]byte
			for i := 4; i >= 0; i-- {
				enc[i] = base85[v%85]
				v /= 85
			}
			line = append(line, enc[:]...)
		}
		line = append(line, '\n')
		w.Write(line)
	}
}
