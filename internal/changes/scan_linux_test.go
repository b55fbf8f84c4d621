package changes

import (
	"bytes"
	"testing"
)

func TestScratch(t *testing.T) {
	ws := workspace(t, map[string]string{"a.txt": "one\ntwo\nthree\n", "b.txt": "bee\n", "d/x": "x\n", "d/y": "y\n", "mv.txt": "move me\n", "keep/k": "k\n", "bin": "\x00\x01"})
	s := review(t, ws, `
echo four >> a.txt
rm b.txt
mkdir -p new/deep && echo new > new/deep/file
mv mv.txt moved.txt
rm -rf d && mkdir d && echo z > d/z
chmod 755 keep/k
ln -s a.txt link
ln -s /etc/passwd out
ln moved.txt hard
printf '\x00\x02' > bin
mkfifo fifo
mv keep kept
`)
	ch, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ch {
		t.Logf("%+v", c)
	}
	var b bytes.Buffer
	s.WriteDiff(&b, ch, ShowOptions{})
	t.Log("\n" + b.String())
	b.Reset()
	s.WriteStat(&b, ch, false)
	t.Log("\n" + b.String())
	t.Log(Summary(s.ID(), ch))
}
