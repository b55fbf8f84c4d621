package e2b

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/daemon"
)

// metricJSON is E2B's SandboxMetric, from one of the daemon's samples
// (daemon.Usage): memUsed is the memory the sandbox's cgroup is charged
// less its page cache (memCache, tmpfs included: what the sandbox writes
// into its root counts there and in diskUsed), and never less than its
// processes' anonymous memory (a charge read apart from the cache can lag
// it: v1's is approximate), memTotal its memory limit;
// diskUsed and diskTotal are its root layer's.
type metricJSON struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// maxMetricIDs bounds the sandbox_ids of GET /sandboxes/metrics, as E2B's
// API does.
const maxMetricIDs = 100

// metric is E2B's form of u.
func metric(u daemon.Usage) metricJSON {
	return metricJSON{
		Timestamp: u.Time.UTC(), TimestampUnix: u.Time.Unix(),
		CPUCount: u.CPUCount, CPUUsedPct: u.CPUPercent,
		MemUsed: max(u.MemoryBytes-u.MemoryCacheBytes, u.MemoryAnonBytes, 0), MemTotal: u.MemoryLimit, MemCache: u.MemoryCacheBytes,
		DiskUsed: u.DiskBytes, DiskTotal: u.DiskLimit,
	}
}

// monitor is the daemon's sandbox metrics, or an error (501) for one
// without.
func (h *Handler) monitor() (daemon.Monitor, error) {
	mon, ok := h.m.(daemon.Monitor)
	if !ok {
		return nil, errorf(daemon.ErrUnsupported, "this daemon samples no sandbox metrics")
	}
	return mon, nil
}

// metrics answers GET /sandboxes/{id}/metrics: the sandbox's samples
// from start to end (Unix seconds; either may be left out), oldest
// first.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request, tenant string) error {
	q := r.URL.Query()
	var bounds [2]time.Time
	for k := range q {
		if k != "start" && k != "end" {
			return errorf(errUnsupported, "query: %q: not a parameter of GET /sandboxes/{sandboxID}/metrics", k)
		}
	}
	for i, name := range []string{"start", "end"} {
		s := q.Get(name)
		if s == "" {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return errorf(daemon.ErrInvalid, "query: %s: want Unix seconds (0 or more), got %q", name, s)
		}
		bounds[i] = time.Unix(n, 0)
	}
	if !bounds[0].IsZero() && !bounds[1].IsZero() && bounds[1].Before(bounds[0]) {
		return errorf(daemon.ErrInvalid, "query: end %d is before start %d", bounds[1].Unix(), bounds[0].Unix())
	}
	mon, err := h.monitor()
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if _, err := h.live(r, tenant, id); err != nil {
		return err
	}
	us, err := mon.Usage(r.Context(), tenant, id, bounds[0], bounds[1])
	if err != nil {
		return err
	}
	out := make([]metricJSON, 0, len(us))
	for _, u := range us {
		out = append(out, metric(u))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// sandboxesMetrics answers GET /sandboxes/metrics?sandbox_ids=A,B: the
// latest sample of each of the tenant's running sandboxes named; other
// ids (unknown, another tenant's, gone) are left out, as E2B's API leaves
// out those that do not run.
func (h *Handler) sandboxesMetrics(w http.ResponseWriter, r *http.Request, tenant string) error {
	q := r.URL.Query()
	for k := range q {
		if k != "sandbox_ids" {
			return errorf(errUnsupported, "query: %q: not a parameter of GET /sandboxes/metrics", k)
		}
	}
	ids, err := metricIDs(q)
	if err != nil {
		return err
	}
	mon, err := h.monitor()
	if err != nil {
		return err
	}
	out := map[string]metricJSON{}
	for _, id := range ids {
		if _, err := h.live(r, tenant, id); err != nil {
			continue
		}
		us, err := mon.Usage(r.Context(), tenant, id, time.Time{}, time.Time{})
		if err != nil || len(us) == 0 {
			continue
		}
		out[id] = metric(us[len(us)-1])
	}
	writeJSON(w, http.StatusOK, struct {
		Sandboxes map[string]metricJSON `json:"sandboxes"`
	}{out})
	return nil
}

// metricIDs parses sandbox_ids: comma-separated, at least one, at most
// maxMetricIDs, none twice.
func metricIDs(q url.Values) ([]string, error) {
	var ids []string
	for _, v := range q["sandbox_ids"] {
		for id := range strings.SplitSeq(v, ",") {
			if id = strings.TrimSpace(id); id == "" {
				continue
			}
			if slices.Contains(ids, id) {
				return nil, errorf(daemon.ErrInvalid, "query: sandbox_ids: %q is listed twice", id)
			}
			if len(ids) == maxMetricIDs {
				return nil, errorf(daemon.ErrInvalid, "query: sandbox_ids: more than %d", maxMetricIDs)
			}
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, errorf(daemon.ErrInvalid, "query: sandbox_ids: required, a comma-separated list of sandbox IDs")
	}
	return ids, nil
}
