// Command imagepull measures how long pulling and unpacking an image
// takes with hutch against the floor of doing the same with well-kept
// tools, in the same run: a registry on loopback (go-containerregistry's,
// in this process) serves a multi-layer image this program makes, and
// each round times
//
//	hutch image pull --insecure-registry HOST REF   (a fresh store: nothing cached)
//	crane pull REF image.tar, then tar -x of each of its layers
//
// alternately, and prints the medians and their ratio.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	n := flag.Int("n", 5, "timed rounds")
	sizeMiB := flag.Int("size", 100, "uncompressed image size in MiB")
	layers := flag.Int("layers", 5, "layers")
	hutch := flag.String("hutch", "hutch", "hutch's binary (hutch-serve next to it)")
	crane := flag.String("crane", "crane", "crane's binary")
	work := flag.String("dir", os.TempDir(), "directory for the stores and unpacked layers")
	markdown := flag.Bool("markdown", false, "print a markdown table")
	flag.Parse()

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ref := host + "/bench/image:1"
	img := makeImage(*sizeMiB<<20, *layers)
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		log.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		log.Fatal(err)
	}

	var th, tc []time.Duration
	for i := 0; i < *n+1; i++ { // the first round warms up
		d, err := os.MkdirTemp(*work, "imagepull-")
		if err != nil {
			log.Fatal(err)
		}
		h := timed(*hutch, "image", "pull", "--insecure-registry", host, "--state-dir", filepath.Join(d, "state"), ref)
		c := timed("sh", "-c", fmt.Sprintf(`set -e; %s pull --insecure %s %s/image.tar; mkdir %s/x; cd %s/x; tar -xf ../image.tar;
			for l in $(tar -tf ../image.tar | grep -v -e manifest.json -e '^sha256:' -e '\.json$'); do mkdir -p "../u/$l"; tar -xzf "$l" -C "../u/$l" 2>/dev/null || tar -xf "$l" -C "../u/$l"; done`,
			*crane, ref, d, d, d))
		chmodAll(d)
		os.RemoveAll(d)
		if i > 0 {
			th, tc = append(th, h), append(tc, c)
		}
	}
	mh, mc := median(th), median(tc)
	if *markdown {
		fmt.Printf("| command | median s |\n| --- | ---: |\n| hutch image pull | %.2f |\n| crane pull + tar -x | %.2f |\n\n", mh.Seconds(), mc.Seconds())
		fmt.Printf("| ratio | median |\n| --- | ---: |\n| hutch / (crane + tar) | %.2f |\n", mh.Seconds()/mc.Seconds())
		return
	}
	fmt.Printf("image: %d MiB in %d layers, %d rounds\n", *sizeMiB, *layers, *n)
	fmt.Printf("hutch image pull      %.2f s\ncrane pull + tar -x   %.2f s\nratio                 %.2f\n", mh.Seconds(), mc.Seconds(), mh.Seconds()/mc.Seconds())
}

// makeImage is an image of layers layers, size bytes in all, of files of
// text that compresses about as well as programs and sources do.
func makeImage(size, layers int) v1.Image {
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"func", "return", "if", "else", "for", "range", "package", "import", "var", "const", "type", "struct", "nil", "err", "string", "int"}
	var ls []v1.Layer
	for l := 0; l < layers; l++ {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		per := size / layers
		for f := 0; per > 0; f++ {
			var body strings.Builder
			for body.Len() < 256<<10 && body.Len() < per {
				body.WriteString(words[rng.IntN(len(words))])
				body.WriteByte(" \n\t"[rng.IntN(3)])
				fmt.Fprintf(&body, "%x", rng.Uint32())
			}
			tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("layer%d/dir%d/file%d.txt", l, f/50, f), Mode: 0o644, Size: int64(body.Len()), Typeflag: tar.TypeReg})
			tw.Write([]byte(body.String()))
			per -= body.Len()
		}
		tw.Close()
		data := b.Bytes()
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
		if err != nil {
			log.Fatal(err)
		}
		ls = append(ls, layer)
	}
	img, err := mutate.AppendLayers(empty.Image, ls...)
	if err != nil {
		log.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		log.Fatal(err)
	}
	return img
}

func timed(cmd string, args ...string) time.Duration {
	t0 := time.Now()
	c := exec.Command(cmd, args...)
	c.Stdout, c.Stderr = io.Discard, os.Stderr
	if err := c.Run(); err != nil {
		log.Fatalf("%s %s: %v", cmd, strings.Join(args, " "), err)
	}
	return time.Since(t0)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// chmodAll makes every directory below d writable, so that what a layer
// made read-only can be removed.
func chmodAll(d string) {
	_ = filepath.Walk(d, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
}
