package interp

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/kernel"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// python is Debian's Python, which python3-ipykernel installs into.
const python = "/usr/bin/python3"

// startKernel starts a kernel that runs Startup.
func startKernel(t *testing.T) *kernel.Kernel {
	t.Helper()
	for _, m := range []string{"ipykernel", "matplotlib", "pandas"} {
		err := exec.Command(python, "-c", "import "+m).Run()
		testutil.Need(t, err == nil, python+" cannot import "+m+" (Debian: python3-"+m+")")
	}
	file := filepath.Join(t.TempDir(), "startup.py")
	if err := os.WriteFile(file, Startup, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k, err := kernel.Start(ctx, kernel.Config{Argv: []string{python, "-m", "ipykernel_launcher", "-f", kernel.ConnectionFileArg,
		"--InteractiveShell.colors=NoColor", "--IPKernelApp.exec_files=" + file}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// run executes code and returns its results, failing on an error.
func run(t *testing.T, k *kernel.Kernel, code string) []*kernel.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out []*kernel.Result
	_, err := k.Execute(ctx, code, kernel.ExecuteOptions{}, func(o kernel.Output) {
		switch o := o.(type) {
		case *kernel.Result:
			out = append(out, o)
		case *kernel.Error:
			t.Errorf("%s: %s\n%v", code, o, o.Traceback)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// chart is the one e2b/chart of code's results, as JSON-decoded.
func chart(t *testing.T, k *kernel.Kernel, code string) map[string]any {
	t.Helper()
	for _, r := range run(t, k, code) {
		if c, ok := r.Data["e2b/chart"].(map[string]any); ok {
			if _, png := r.Data["image/png"]; !png {
				t.Errorf("a chart without its image: %v", keys(r.Data))
			}
			return c
		}
	}
	t.Fatalf("no e2b/chart from %q", code)
	return nil
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func want(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	var gv, wv any
	_ = json.Unmarshal(g, &gv)
	_ = json.Unmarshal(w, &wv)
	if !reflect.DeepEqual(gv, wv) {
		t.Errorf("%s: got %s, want %s", what, g, w)
	}
}

func TestStartupResults(t *testing.T) {
	k := startKernel(t)
	const pre = "import matplotlib.pyplot as plt\n"

	t.Run("line", func(t *testing.T) {
		c := chart(t, k, pre+"fig, ax = plt.subplots()\nax.plot([1, 2, 3], [4, 5, 6], label='a')\nax.plot([1, 2, 3], [1, 1, 2])\nax.set_title('T')\nax.set_xlabel('Time (s)')\nplt.show()")
		want(t, "type", c["type"], "line")
		want(t, "title", c["title"], "T")
		want(t, "x_label", c["x_label"], "Time (s)")
		want(t, "x_unit", c["x_unit"], "s")
		want(t, "y_label", c["y_label"], nil)
		want(t, "y_unit", c["y_unit"], nil)
		want(t, "x_scale", c["x_scale"], "linear")
		for _, f := range []string{"y_unit", "x_ticks", "x_tick_labels", "y_ticks", "y_scale"} {
			if _, ok := c[f]; !ok {
				t.Errorf("no %s: %v", f, c)
			}
		}
		els := c["elements"].([]any)
		want(t, "elements", els, []any{
			map[string]any{"label": "a", "points": [][]float64{{1, 4}, {2, 5}, {3, 6}}},
			map[string]any{"label": "Line 1", "points": [][]float64{{1, 1}, {2, 1}, {3, 2}}},
		})
	})
	t.Run("dates", func(t *testing.T) {
		c := chart(t, k, pre+"import datetime\nfig, ax = plt.subplots()\nax.plot([datetime.datetime(2024, 1, 1), datetime.datetime(2024, 1, 2)], [1, 2])\nplt.show()")
		want(t, "x_scale", c["x_scale"], "datetime")
		want(t, "elements", c["elements"], []any{map[string]any{"label": "Line 0", "points": []any{[]any{"2024-01-01T00:00:00", 1}, []any{"2024-01-02T00:00:00", 2}}}})
		if ticks, _ := c["x_ticks"].([]any); len(ticks) == 0 {
			t.Errorf("no date ticks: %v", c["x_ticks"])
		} else if _, ok := ticks[0].(string); !ok {
			t.Errorf("date ticks are not ISO strings: %v", ticks)
		}
	})
	t.Run("categories", func(t *testing.T) {
		c := chart(t, k, pre+"fig, ax = plt.subplots()\nax.plot(['a', 'b', 'c'], [1, 2, 3])\nplt.show()")
		want(t, "x_scale", c["x_scale"], "categorical")
		want(t, "x_tick_labels", c["x_tick_labels"], []string{"a", "b", "c"})
	})
	t.Run("scatter", func(t *testing.T) {
		c := chart(t, k, pre+"fig, ax = plt.subplots()\nax.scatter([1, 2], [3, 4], label='p')\nax.set_yscale('log')\nplt.show()")
		want(t, "type", c["type"], "scatter")
		want(t, "y_scale", c["y_scale"], "log")
		want(t, "elements", c["elements"], []any{map[string]any{"label": "p", "points": [][]float64{{1, 3}, {2, 4}}}})
	})
	t.Run("bar", func(t *testing.T) {
		c := chart(t, k, pre+"fig, ax = plt.subplots()\nax.bar(['A', 'B'], [10, 20], label='g1')\nax.set_ylabel('Sales [$]')\nplt.show()")
		want(t, "type", c["type"], "bar")
		want(t, "y_unit", c["y_unit"], "$")
		want(t, "elements", c["elements"], []any{
			map[string]any{"label": "A", "group": "g1", "value": 10},
			map[string]any{"label": "B", "group": "g1", "value": 20},
		})
	})
	t.Run("pie", func(t *testing.T) {
		c := chart(t, k, pre+"fig, ax = plt.subplots()\nax.pie([90, 10], labels=['big', 'small'])\nplt.show()")
		want(t, "type", c["type"], "pie")
		want(t, "elements", c["elements"], []any{
			map[string]any{"label": "big", "angle": 324, "radius": 1},
			map[string]any{"label": "small", "angle": 36, "radius": 1},
		})
		if _, ok := c["x_label"]; ok {
			t.Errorf("a pie has axis labels: %v", c)
		}
	})
	t.Run("box", func(t *testing.T) {
		c := chart(t, k, pre+"data = {'Class A': [85, 90, 78, 92, 88], 'Class B': [95, 89, 76, 91, 84, 87], 'Class C': [75, 82, 88, 79, 86]}\nfig, ax = plt.subplots()\nax.boxplot(list(data.values()), labels=list(data.keys()), patch_artist=True)\nplt.show()")
		want(t, "type", c["type"], "box_and_whisker")
		want(t, "elements", c["elements"], []any{
			map[string]any{"label": "Class A", "min": 78, "first_quartile": 85, "median": 88, "third_quartile": 90, "max": 92, "outliers": []any{}},
			map[string]any{"label": "Class B", "min": 84, "first_quartile": 84.75, "median": 88, "third_quartile": 90.5, "max": 95, "outliers": []any{76}},
			map[string]any{"label": "Class C", "min": 75, "first_quartile": 79, "median": 82, "third_quartile": 86, "max": 88, "outliers": []any{}},
		})
	})
	t.Run("superchart", func(t *testing.T) {
		c := chart(t, k, pre+"fig, (a, b) = plt.subplots(1, 2)\nfig.suptitle('Both')\na.plot([1, 2])\nb.bar(['x'], [3])\nplt.show()")
		want(t, "type", c["type"], "superchart")
		want(t, "title", c["title"], "Both")
		els := c["elements"].([]any)
		if len(els) != 2 || els[0].(map[string]any)["type"] != "line" || els[1].(map[string]any)["type"] != "bar" {
			t.Errorf("superchart elements: %v", els)
		}
	})
	t.Run("dataframe", func(t *testing.T) {
		res := run(t, k, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y'], 'when': pd.to_datetime(['2024-01-01', '2024-01-02'])})")
		if len(res) != 1 || !res[0].Main {
			t.Fatalf("results: %v", res)
		}
		want(t, "e2b/data", res[0].Data["e2b/data"], map[string]any{"a": []any{1, 2}, "b": []any{"x", "y"}, "when": []any{"2024-01-01T00:00:00", "2024-01-02T00:00:00"}})
		if _, ok := res[0].Data["text/html"]; !ok {
			t.Errorf("no html: %v", keys(res[0].Data))
		}
	})
	t.Run("json", func(t *testing.T) {
		res := run(t, k, "import numpy as np\n{'a': [1, np.int64(2)], 'f': float('nan')}")
		if len(res) != 1 {
			t.Fatalf("results: %v", res)
		}
		want(t, "application/json", res[0].Data["application/json"], map[string]any{"a": []any{1, 2}, "f": nil})
	})
	t.Run("image saved", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "saved.png")
		res := run(t, k, "from PIL import Image\nimport io\nimage = Image.new('RGBA', (16, 16), 'red')\nimage.save(io.BytesIO(), 'PNG')\nimage.save("+strconv.Quote(file)+")")
		if len(res) != 1 || res[0].Main {
			t.Fatalf("results: want one display of the image saved to a file name (none of the one to a buffer), got %v", res)
		}
		if _, ok := res[0].Data["image/png"]; !ok {
			t.Errorf("the saved image's display has no image/png: %v", keys(res[0].Data))
		}
		if _, err := os.Stat(file); err != nil {
			t.Errorf("the image was not saved: %v", err)
		}
	})
	t.Run("nothing to chart", func(t *testing.T) {
		for _, r := range run(t, k, pre+"fig, ax = plt.subplots()\nplt.show()\n1") {
			if _, ok := r.Data["e2b/chart"]; ok {
				t.Errorf("a blank figure has a chart: %v", r.Data["e2b/chart"])
			}
		}
	})
}
