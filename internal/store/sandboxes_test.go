package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// base is the creation time of the test sandboxes; it is not UTC and has a
// monotonic reading, which the store must drop.
var base = time.Date(2026, 3, 1, 10, 0, 0, 123456789, time.FixedZone("CET", 3600))

func testSandbox(id, tenant string) Sandbox {
	return Sandbox{
		ID:          id,
		Tenant:      tenant,
		State:       StateRunning,
		Labels:      map[string]string{"team": "infra", "purpose": "ci"},
		Spec:        []byte(`{"network":{"allow":["example.com:443"]}}`),
		Created:     base,
		Expires:     base.Add(time.Hour),
		LastActive:  base.Add(time.Minute),
		IdleTimeout: 10 * time.Minute,
		PID:         4242,
		PIDStart:    math.MaxUint64 - 1,
		Dir:         "/var/lib/hutch/sandboxes/" + id,
		Image:       "sha256:" + strings.Repeat("ab", 32),
		Tier:        "gvisor",
		Volumes:     []byte(`[{"name":"data","dir":"/var/lib/hutch/volumes/v1","at":"/data"}]`),
	}
}

// assertSandbox compares got with want, times by Equal, and checks that
// got's times are in UTC.
func assertSandbox(t *testing.T, got, want Sandbox) {
	t.Helper()
	if got.ID != want.ID || got.Tenant != want.Tenant || got.State != want.State ||
		string(got.Spec) != string(want.Spec) || got.IdleTimeout != want.IdleTimeout ||
		got.PID != want.PID || got.PIDStart != want.PIDStart || got.Dir != want.Dir ||
		got.Image != want.Image || got.Tier != want.Tier || got.Checkpoint != want.Checkpoint ||
		string(got.Volumes) != string(want.Volumes) {
		t.Errorf("sandbox\n got %+v\nwant %+v", got, want)
	}
	if len(got.Labels) == 0 && got.Labels != nil {
		t.Errorf("sandbox %s: empty labels read back as an empty map, want nil", got.ID)
	}
	if !maps.Equal(got.Labels, want.Labels) {
		t.Errorf("sandbox %s: labels %v, want %v", got.ID, got.Labels, want.Labels)
	}
	for _, tm := range []struct {
		name      string
		got, want time.Time
	}{
		{"Created", got.Created, want.Created},
		{"Expires", got.Expires, want.Expires},
		{"LastActive", got.LastActive, want.LastActive},
	} {
		if !tm.got.Equal(tm.want) || tm.got.IsZero() != tm.want.IsZero() {
			t.Errorf("sandbox %s: %s %v, want %v", got.ID, tm.name, tm.got, tm.want)
		}
		if !tm.got.IsZero() && tm.got.Location() != time.UTC {
			t.Errorf("sandbox %s: %s in %v, want UTC", got.ID, tm.name, tm.got.Location())
		}
	}
}

func ids(list []Sandbox) []string {
	var out []string
	for _, sb := range list {
		out = append(out, sb.ID)
	}
	return out
}

func TestSandboxCRUD(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)

	sb := testSandbox("sb1", "acme")
	if err := s.InsertSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSandbox(ctx, "acme", "sb1")
	if err != nil {
		t.Fatal(err)
	}
	assertSandbox(t, got, sb)

	// A sandbox with the zero values where they are allowed.
	bare := Sandbox{ID: "bare", Tenant: "acme", State: StateStarting}
	if err := s.InsertSandbox(ctx, bare); err != nil {
		t.Fatal(err)
	}
	got, err = s.GetSandbox(ctx, "", "bare")
	if err != nil {
		t.Fatal(err)
	}
	bare.Tier = NamespaceTier // recorded so, when the record names none
	assertSandbox(t, got, bare)
	if got.Spec != nil || got.Labels != nil {
		t.Errorf("bare sandbox read back with Spec %q, Labels %v; want nil", got.Spec, got.Labels)
	}

	now := time.Now()
	upd, err := s.UpdateSandbox(ctx, "sb1", func(sb *Sandbox) error {
		sb.State = StatePaused
		sb.LastActive = now
		sb.PID = 0
		sb.Labels["purpose"] = "dev"
		delete(sb.Labels, "team")
		sb.Labels["owner"] = "ann"
		sb.Spec = []byte(`{}`)
		sb.Image = ""
		sb.Checkpoint = "/var/lib/hutch/sandboxes/sb1/checkpoint"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := sb
	want.State = StatePaused
	want.Checkpoint = "/var/lib/hutch/sandboxes/sb1/checkpoint"
	want.LastActive = now
	want.PID = 0
	want.Labels = map[string]string{"purpose": "dev", "owner": "ann"}
	want.Spec = []byte(`{}`)
	want.Image = ""
	assertSandbox(t, upd, want)
	got, err = s.GetSandbox(ctx, "acme", "sb1")
	if err != nil {
		t.Fatal(err)
	}
	assertSandbox(t, got, want)
	assertSandbox(t, upd, got)

	// The tier is the sandbox's for its life.
	if _, err := s.UpdateSandbox(ctx, "sb1", func(sb *Sandbox) error {
		sb.Tier = NamespaceTier
		return nil
	}); err == nil || !strings.Contains(err.Error(), "cannot change") {
		t.Errorf("UpdateSandbox changing the tier: %v, want refused", err)
	}
	// So are its volumes.
	if _, err := s.UpdateSandbox(ctx, "sb1", func(sb *Sandbox) error {
		sb.Volumes = nil
		return nil
	}); err == nil || !strings.Contains(err.Error(), "cannot change") {
		t.Errorf("UpdateSandbox changing the volumes: %v, want refused", err)
	}

	// Removing all labels.
	if _, err := s.UpdateSandbox(ctx, "sb1", func(sb *Sandbox) error {
		clear(sb.Labels)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got, err = s.GetSandbox(ctx, "acme", "sb1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels != nil {
		t.Errorf("labels after clearing: %v", got.Labels)
	}

	if err := s.DeleteSandbox(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSandbox(ctx, "", "sb1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetSandbox after delete: %v, want ErrNotFound", err)
	}
	if err := s.DeleteSandbox(ctx, "sb1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("DeleteSandbox again: %v, want ErrNotFound", err)
	}
	if _, err := s.UpdateSandbox(ctx, "sb1", func(*Sandbox) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Errorf("UpdateSandbox of a deleted sandbox: %v, want ErrNotFound", err)
	}
	// Its labels went with it (the foreign key cascades).
	var labels int
	if err := s.r.QueryRowContext(ctx, "SELECT count(*) FROM sandbox_labels WHERE sandbox_id = 'sb1'").Scan(&labels); err != nil {
		t.Fatal(err)
	}
	if labels != 0 {
		t.Errorf("%d labels left of a deleted sandbox", labels)
	}
}

func TestInsertConflict(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	if err := s.InsertSandbox(ctx, testSandbox("sb1", "acme")); err != nil {
		t.Fatal(err)
	}
	// The same ID for another tenant conflicts too.
	other := testSandbox("sb1", "beta")
	other.Labels = map[string]string{"x": "y"}
	err := s.InsertSandbox(ctx, other)
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("InsertSandbox of a duplicate ID: %v, want ErrConflict", err)
	}
	if want := `store: insert sandbox "sb1": conflict`; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	// Nothing of the second insert remains.
	got, err := s.GetSandbox(ctx, "", "sb1")
	if err != nil {
		t.Fatal(err)
	}
	assertSandbox(t, got, testSandbox("sb1", "acme"))
}

func TestInsertInvalid(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	for name, mod := range map[string]func(*Sandbox){
		"empty id":                        func(sb *Sandbox) { sb.ID = "" },
		"empty tenant":                    func(sb *Sandbox) { sb.Tenant = "" },
		"bad state":                       func(sb *Sandbox) { sb.State = "zombie" },
		"empty label":                     func(sb *Sandbox) { sb.Labels[""] = "x" },
		"bad spec":                        func(sb *Sandbox) { sb.Spec = []byte("{") },
		"negative idle":                   func(sb *Sandbox) { sb.IdleTimeout = -1 },
		"negative pid":                    func(sb *Sandbox) { sb.PID = -1 },
		"time too early":                  func(sb *Sandbox) { sb.Created = time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC) },
		"time too late":                   func(sb *Sandbox) { sb.Expires = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC) },
		"checkpoint of a running sandbox": func(sb *Sandbox) { sb.Checkpoint = "/x" },
	} {
		sb := testSandbox("sb-"+strings.ReplaceAll(name, " ", "-"), "acme")
		mod(&sb)
		err := s.InsertSandbox(ctx, sb)
		if err == nil {
			t.Errorf("%s: InsertSandbox succeeded", name)
			continue
		}
		if !strings.HasPrefix(err.Error(), "store: insert sandbox ") {
			t.Errorf("%s: error %q", name, err)
		}
	}
	if list, err := s.ListSandboxes(ctx, Filter{}); err != nil || len(list) != 0 {
		t.Errorf("ListSandboxes after invalid inserts = %v, %v", ids(list), err)
	}
}

func TestTenantIsolation(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	for i, tenant := range []string{"acme", "beta", "acme", "beta"} {
		sb := testSandbox(fmt.Sprintf("%s-%d", tenant, i), tenant)
		sb.Created = base.Add(time.Duration(i) * time.Second)
		if i < 2 {
			sb.Tier = "" // recorded as the namespace tier
		}
		if err := s.InsertSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}

	if _, err := s.GetSandbox(ctx, "beta", "acme-0"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetSandbox of another tenant's sandbox: %v, want ErrNotFound", err)
	}
	if got, err := s.GetSandbox(ctx, "acme", "acme-0"); err != nil || got.Tenant != "acme" {
		t.Errorf("GetSandbox of one's own sandbox: %v, %v", got.ID, err)
	}
	if got, err := s.GetSandbox(ctx, "", "beta-1"); err != nil || got.Tenant != "beta" {
		t.Errorf("GetSandbox with any tenant: %v, %v", got.ID, err)
	}

	for tenant, want := range map[string][]string{
		"acme":  {"acme-0", "acme-2"},
		"beta":  {"beta-1", "beta-3"},
		"gamma": nil,
		"":      {"acme-0", "beta-1", "acme-2", "beta-3"},
	} {
		list, err := s.ListSandboxes(ctx, Filter{Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(list); !slices.Equal(got, want) {
			t.Errorf("ListSandboxes(tenant %q) = %v, want %v", tenant, got, want)
		}
	}

	for tenant, want := range map[string]int{"acme": 2, "beta": 2, "gamma": 0, "": 4} {
		if n, err := s.CountSandboxes(ctx, tenant); err != nil || n != want {
			t.Errorf("CountSandboxes(%q) = %d, %v; want %d", tenant, n, err, want)
		}
	}
	if _, err := s.UpdateSandbox(ctx, "acme-0", func(sb *Sandbox) error {
		sb.State = StateStopped
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.CountSandboxes(ctx, "acme"); err != nil || n != 1 {
		t.Errorf("CountSandboxes(acme) with one stopped = %d, %v; want 1", n, err)
	}
	if _, err := s.UpdateSandbox(ctx, "beta-1", func(sb *Sandbox) error {
		sb.State = StatePaused
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// acme-0 (stopped) and beta-1 (paused) are of the namespace tier,
	// acme-2 and beta-3 (running) of gvisor.
	for except, want := range map[string]map[StateTier]int{
		"":     {{StateRunning, "gvisor"}: 2, {StatePaused, NamespaceTier}: 1},
		"beta": {{StateRunning, "gvisor"}: 1},
		"acme": {{StateRunning, "gvisor"}: 1, {StatePaused, NamespaceTier}: 1},
	} {
		if got, err := s.CountStates(ctx, except); err != nil || !maps.Equal(got, want) {
			t.Errorf("CountStates(except %q) = %v, %v; want %v", except, got, err, want)
		}
	}
}

func TestListFilters(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	add := func(id, tenant, state string, created int, labels map[string]string) {
		t.Helper()
		sb := testSandbox(id, tenant)
		sb.State = state
		sb.Created = base.Add(time.Duration(created) * time.Second)
		sb.Labels = labels
		if err := s.InsertSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	// Inserted out of order of creation; c and d are created at the same
	// time, and come in the order of their IDs.
	add("e", "acme", StateRunning, 5, map[string]string{"env": "prod", "team": "web"})
	add("a", "acme", StateRunning, 1, map[string]string{"env": "prod", "team": "db"})
	add("d", "acme", StatePaused, 3, map[string]string{"env": "dev", "team": "web"})
	add("c", "acme", StateRunning, 3, nil)
	add("b", "beta", StateRunning, 2, map[string]string{"env": "prod", "team": "web"})

	for _, tc := range []struct {
		f    Filter
		want []string
	}{
		{Filter{}, []string{"a", "b", "c", "d", "e"}},
		{Filter{Labels: map[string]string{}}, []string{"a", "b", "c", "d", "e"}},
		{Filter{State: StateRunning}, []string{"a", "b", "c", "e"}},
		{Filter{State: StateStopped}, nil},
		{Filter{Labels: map[string]string{"env": "prod"}}, []string{"a", "b", "e"}},
		{Filter{Tenant: "acme", Labels: map[string]string{"env": "prod"}}, []string{"a", "e"}},
		{Filter{Labels: map[string]string{"env": "prod", "team": "web"}}, []string{"b", "e"}},
		{Filter{Tenant: "acme", State: StateRunning, Labels: map[string]string{"env": "prod", "team": "web"}}, []string{"e"}},
		{Filter{Labels: map[string]string{"team": "web"}, State: StatePaused}, []string{"d"}},
		{Filter{Labels: map[string]string{"env": "staging"}}, nil},
		{Filter{Labels: map[string]string{"env": ""}}, nil},
		{Filter{Labels: map[string]string{"nope": "prod"}}, nil},
		// A value that would break string-built SQL is only a value.
		{Filter{Tenant: "acme' OR '1'='1", Labels: map[string]string{"env') OR 1 --": "x"}}, nil},
	} {
		list, err := s.ListSandboxes(ctx, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(list); !slices.Equal(got, tc.want) {
			t.Errorf("ListSandboxes(%+v) = %v, want %v", tc.f, got, tc.want)
		}
	}

	list, err := s.ListSandboxes(ctx, Filter{Labels: map[string]string{"team": "db"}})
	if err != nil || len(list) != 1 {
		t.Fatalf("ListSandboxes(team=db) = %v, %v", ids(list), err)
	}
	if want := map[string]string{"env": "prod", "team": "db"}; !maps.Equal(list[0].Labels, want) {
		t.Errorf("labels of a listed sandbox: %v, want all of them, %v", list[0].Labels, want)
	}

	if _, err := s.ListSandboxes(ctx, Filter{State: "zombie"}); err == nil {
		t.Error("ListSandboxes with an invalid state succeeded")
	}
}

// TestLabelFilterUsesIndex checks the query plan of a label filter: the
// candidates come from the index on (key, value, sandbox_id), not from a
// scan of the labels.
func TestLabelFilterUsesIndex(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	for _, f := range []Filter{
		{Labels: map[string]string{"env": "prod"}},
		{Tenant: "acme", State: StateRunning, Labels: map[string]string{"env": "prod", "team": "web"}},
	} {
		q, args := listQuery(f)
		rows, err := s.r.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		text := strings.Join(plan, "\n")
		if got, want := strings.Count(text, "INDEX sandbox_labels_key_value (key=? AND value=?)"), len(f.Labels); got != want {
			t.Errorf("plan of %+v uses the label index %d times, want %d:\n%s", f, got, want, text)
		}
		if strings.Contains(text, "SCAN sandbox_labels") || strings.Contains(text, "SCAN l") {
			t.Errorf("plan of %+v scans the labels:\n%s", f, text)
		}
		t.Logf("plan of %+v:\n%s", f, text)
	}
}

func TestUpdateSandboxConcurrent(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	sb := testSandbox("sb1", "acme")
	sb.Labels = nil
	if err := s.InsertSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	const goroutines, increments = 20, 10
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Go(func() {
			for range increments {
				_, err := s.UpdateSandbox(ctx, "sb1", func(sb *Sandbox) error {
					n, _ := strconv.Atoi(sb.Labels["n"])
					sb.Labels["n"] = strconv.Itoa(n + 1)
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	// Readers run meanwhile, and see a committed count each time.
	done := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			got, err := s.GetSandbox(ctx, "acme", "sb1")
			if err != nil {
				errs <- err
				return
			}
			if n, err := strconv.Atoi(got.Labels["n"]); got.Labels != nil && (err != nil || n < 1 || n > goroutines*increments) {
				errs <- fmt.Errorf("a reader saw n = %q", got.Labels["n"])
				return
			}
		}
	})
	wg.Wait()
	close(done)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, err := s.GetSandbox(ctx, "acme", "sb1")
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.Itoa(goroutines * increments); got.Labels["n"] != want {
		t.Errorf("after %d concurrent increments n = %q, want %s", goroutines*increments, got.Labels["n"], want)
	}
}

func TestUpdateSandboxErrors(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	sb := testSandbox("sb1", "acme")
	if err := s.InsertSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	unchanged := func() {
		t.Helper()
		got, err := s.GetSandbox(ctx, "acme", "sb1")
		if err != nil {
			t.Fatal(err)
		}
		assertSandbox(t, got, sb)
	}

	errStop := errors.New("stop")
	_, err := s.UpdateSandbox(ctx, "sb1", func(sb *Sandbox) error {
		sb.State = StateStopped
		sb.Labels["x"] = "y"
		return errStop
	})
	if !errors.Is(err, errStop) || !strings.HasPrefix(err.Error(), `store: update sandbox "sb1": `) {
		t.Errorf("UpdateSandbox whose fn fails: %v", err)
	}
	unchanged()

	for name, fn := range map[string]func(*Sandbox) error{
		"id":     func(sb *Sandbox) error { sb.ID = "sb2"; return nil },
		"tenant": func(sb *Sandbox) error { sb.Tenant = "beta"; return nil },
		"state":  func(sb *Sandbox) error { sb.State = "zombie"; return nil },
		"label":  func(sb *Sandbox) error { sb.Labels[""] = "x"; return nil },
	} {
		if _, err := s.UpdateSandbox(ctx, "sb1", fn); err == nil {
			t.Errorf("UpdateSandbox changing %s succeeded", name)
		}
		unchanged()
	}

	// A canceled context fails, and changes nothing.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.UpdateSandbox(cctx, "sb1", func(sb *Sandbox) error { sb.PID = 1; return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("UpdateSandbox with a canceled context: %v", err)
	}
	unchanged()
}

func BenchmarkInsertGetSandbox(b *testing.B) {
	ctx := context.Background()
	s, _ := openTest(b)
	sb := testSandbox("", "acme")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		sb.ID = "sb-" + strconv.Itoa(i)
		i++
		if err := s.InsertSandbox(ctx, sb); err != nil {
			b.Fatal(err)
		}
		if _, err := s.GetSandbox(ctx, "acme", sb.ID); err != nil {
			b.Fatal(err)
		}
	}
}

// TestMemoryOf: the memory limits of a tenant's sandboxes that are not
// stopped add up; one without a limit, or with a policy that names none,
// adds nothing.
func TestMemoryOf(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	for i, spec := range []string{
		`{"resources":{"memory":1048576}}`, `{"resources":{"memory":2097152}}`, `{"resources":{}}`, `{}`,
		`{"resources":{"memory":4194304}}`,
	} {
		sb := testSandbox(fmt.Sprintf("m-%d", i), "acme")
		if i == 4 {
			sb.Tenant = "beta"
		}
		sb.Spec = []byte(spec)
		if err := s.InsertSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.MemoryOf(ctx, "acme"); err != nil || n != 3<<20 {
		t.Errorf("MemoryOf(acme) = %d, %v; want %d", n, err, 3<<20)
	}
	if _, err := s.UpdateSandbox(ctx, "m-1", func(sb *Sandbox) error { sb.State = StateStopped; return nil }); err != nil {
		t.Fatal(err)
	}
	if n, err := s.MemoryOf(ctx, "acme"); err != nil || n != 1<<20 {
		t.Errorf("MemoryOf(acme) with one stopped = %d, %v; want %d", n, err, 1<<20)
	}
	if n, err := s.MemoryOf(ctx, "nobody"); err != nil || n != 0 {
		t.Errorf("MemoryOf(nobody) = %d, %v", n, err)
	}
}
