package envd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"path"
	"slices"
	"strconv"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
)

const (
	// maxListEntries bounds the entries of one ListDir and of one watch
	// snapshot.
	maxListEntries = 100_000
	// maxDepth bounds the depth of ListDir.
	maxDepth = 64
	// watchInterval is how often a watch polls its directory.
	watchInterval = 200 * time.Millisecond
	// maxWatchers bounds the watchers of one sandbox.
	maxWatchers = 64
	// maxWatcherEvents bounds the events a watcher keeps between reads.
	maxWatcherEvents = 10_000
)

// entryInfo is filesystem.EntryInfo.
type entryInfo struct {
	Name          string            `json:"name"`
	Type          string            `json:"type"`
	Path          string            `json:"path"`
	Size          string            `json:"size"`
	Mode          uint32            `json:"mode"`
	Permissions   string            `json:"permissions"`
	Owner         string            `json:"owner"`
	Group         string            `json:"group"`
	ModifiedTime  string            `json:"modifiedTime"`
	SymlinkTarget *string           `json:"symlinkTarget,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

// fileType is the filesystem.FileType of fi.
func fileType(fi agent.FileInfo) string {
	switch {
	case fi.Mode&fs.ModeSymlink != 0:
		return "FILE_TYPE_SYMLINK"
	case fi.IsDir:
		return "FILE_TYPE_DIRECTORY"
	case fi.Mode.IsRegular():
		return "FILE_TYPE_FILE"
	}
	return "FILE_TYPE_UNSPECIFIED"
}

// entry describes fi, found at p.
func (h *handler) entry(p string, fi agent.FileInfo) *entryInfo {
	e := &entryInfo{
		Name:         path.Base(p),
		Type:         fileType(fi),
		Path:         p,
		Size:         strconv.FormatInt(fi.Size, 10),
		Mode:         uint32(fi.Mode.Perm()),
		Permissions:  fi.Mode.String(),
		Owner:        h.ownerName(fi.UID, false),
		Group:        h.ownerName(fi.GID, true),
		ModifiedTime: pbTime(fi.ModTime),
	}
	if fi.Link != "" {
		l := fi.Link
		e.SymlinkTarget = &l
	}
	return e
}

// stat describes the file at p.
func (h *handler) stat(ctx context.Context, b *box, p string) (*entryInfo, error) {
	fi, err := b.agent.Stat(ctx, p)
	if err != nil {
		return nil, err
	}
	return h.entry(p, fi), nil
}

// pathRequest decodes a request with a path and resolves the path for the
// request's user.
func (h *handler) pathRequest(r *http.Request, body []byte, req any, p *string) (user, string, error) {
	if err := decode(body, req); err != nil {
		return user{}, "", err
	}
	u, err := h.requestUser(r)
	if err != nil {
		return user{}, "", err
	}
	abs, err := resolvePath(u, *p)
	if err != nil {
		return user{}, "", err
	}
	return u, abs, nil
}

type entryResponse struct {
	Entry *entryInfo `json:"entry"`
}

func (h *handler) fsStat(ctx context.Context, b *box, r *http.Request, body []byte) (any, error) {
	var req struct {
		Path string `json:"path"`
	}
	_, p, err := h.pathRequest(r, body, &req, &req.Path)
	if err != nil {
		return nil, err
	}
	e, err := h.stat(ctx, b, p)
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", p, err)
	}
	return entryResponse{e}, nil
}

// makeDirs makes directory p and its missing parents, owned by u.
func (h *handler) makeDirs(ctx context.Context, b *box, u user, p string) error {
	var missing []string
	for q := p; q != "/"; q = path.Dir(q) {
		fi, err := b.agent.Stat(ctx, q)
		if err == nil {
			if !fi.IsDir {
				return errorf(codeInvalidArgument, "make directory %s: %s is not a directory", p, q)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("make directory %s: %w", p, err)
		}
		missing = append(missing, q)
	}
	if len(missing) == 0 {
		return nil
	}
	if err := b.agent.Mkdir(ctx, p, true); err != nil {
		return fmt.Errorf("make directory %s: %w", p, err)
	}
	for _, q := range slices.Backward(missing) {
		if err := h.own(ctx, b, u, q); err != nil {
			return err
		}
	}
	return nil
}

// own gives the file at p to u, unless it is u's already.
func (h *handler) own(ctx context.Context, b *box, u user, p string) error {
	fi, err := b.agent.Stat(ctx, p)
	if err != nil {
		return fmt.Errorf("chown %s: %w", p, err)
	}
	if fi.UID == u.uid && fi.GID == u.gid {
		return nil
	}
	if err := b.agent.Chown(ctx, p, u.uid, u.gid); err != nil {
		return fmt.Errorf("chown %s: %w", p, err)
	}
	return nil
}

func (h *handler) fsMakeDir(ctx context.Context, b *box, r *http.Request, body []byte) (any, error) {
	var req struct {
		Path string `json:"path"`
	}
	u, p, err := h.pathRequest(r, body, &req, &req.Path)
	if err != nil {
		return nil, err
	}
	auditPaths(r, p)
	if fi, err := b.agent.Stat(ctx, p); err == nil {
		if fi.IsDir {
			return nil, errorf(codeAlreadyExists, "directory %s already exists", p)
		}
		return nil, errorf(codeInvalidArgument, "make directory %s: a file exists there", p)
	}
	if err := h.makeDirs(ctx, b, u, p); err != nil {
		return nil, err
	}
	e, err := h.stat(ctx, b, p)
	if err != nil {
		return nil, fmt.Errorf("make directory %s: %w", p, err)
	}
	return entryResponse{e}, nil
}

func (h *handler) fsMove(ctx context.Context, b *box, r *http.Request, body []byte) (any, error) {
	var req struct {
		Source      string `json:"source"`
		Destination string `json:"destination"`
	}
	u, src, err := h.pathRequest(r, body, &req, &req.Source)
	if err != nil {
		return nil, err
	}
	dst, err := resolvePath(u, req.Destination)
	if err != nil {
		return nil, err
	}
	auditPaths(r, src, dst)
	if _, err := b.agent.Stat(ctx, src); err != nil {
		return nil, fmt.Errorf("move %s: %w", src, err)
	}
	if err := h.makeDirs(ctx, b, u, path.Dir(dst)); err != nil {
		return nil, err
	}
	if err := b.agent.Rename(ctx, src, dst); err != nil {
		return nil, fmt.Errorf("move %s to %s: %w", src, dst, err)
	}
	e, err := h.stat(ctx, b, dst)
	if err != nil {
		return nil, fmt.Errorf("move %s to %s: %w", src, dst, err)
	}
	return entryResponse{e}, nil
}

func (h *handler) fsRemove(ctx context.Context, b *box, r *http.Request, body []byte) (any, error) {
	var req struct {
		Path string `json:"path"`
	}
	_, p, err := h.pathRequest(r, body, &req, &req.Path)
	if err != nil {
		return nil, err
	}
	auditPaths(r, p)
	if err := b.agent.Remove(ctx, p, true); err != nil {
		return nil, fmt.Errorf("remove %s: %w", p, err)
	}
	return struct{}{}, nil
}

// walk lists directory p down to depth levels (1: its entries), calling f
// for each entry; directories are listed, symlinks not followed.
func walk(ctx context.Context, b *box, p string, depth int, count *int, f func(string, agent.FileInfo)) error {
	ents, err := b.agent.List(ctx, p)
	if err != nil {
		return err
	}
	for _, fi := range ents {
		if *count++; *count > maxListEntries {
			return errorf(codeResourceExhausted, "list %s: more than %d entries", p, maxListEntries)
		}
		q := path.Join(p, fi.Name)
		f(q, fi)
		if fi.IsDir && depth > 1 {
			if err := walk(ctx, b, q, depth-1, count, f); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) {
				return err
			}
		}
	}
	return nil
}

func (h *handler) fsListDir(ctx context.Context, b *box, r *http.Request, body []byte) (any, error) {
	var req struct {
		Path  string `json:"path"`
		Depth uint32 `json:"depth"`
	}
	_, p, err := h.pathRequest(r, body, &req, &req.Path)
	if err != nil {
		return nil, err
	}
	depth := int(min(max(req.Depth, 1), maxDepth))
	fi, err := b.agent.Stat(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", p, err)
	}
	if !fi.IsDir {
		return nil, errorf(codeInvalidArgument, "list %s: not a directory", p)
	}
	out := struct {
		Entries []*entryInfo `json:"entries"`
	}{Entries: []*entryInfo{}}
	count := 0
	if err := walk(ctx, b, p, depth, &count, func(q string, fi agent.FileInfo) {
		out.Entries = append(out.Entries, h.entry(q, fi))
	}); err != nil {
		return nil, fmt.Errorf("list %s: %w", p, err)
	}
	return out, nil
}

// snapshot is what a watch saw of a directory: its entries by path
// relative to it.
type snapshot map[string]agent.FileInfo

// filesystemEvent is filesystem.FilesystemEvent.
type filesystemEvent struct {
	Name  string     `json:"name"`
	Type  string     `json:"type"`
	Entry *entryInfo `json:"entry,omitempty"`
}

// watchSpec is what a watch watches.
type watchSpec struct {
	root         string
	recursive    bool
	includeEntry bool
}

func (w watchSpec) snapshot(ctx context.Context, b *box) (snapshot, error) {
	depth := 1
	if w.recursive {
		depth = maxDepth
	}
	snap := make(snapshot)
	count := 0
	err := walk(ctx, b, w.root, depth, &count, func(q string, fi agent.FileInfo) {
		rel := q[len(w.root):]
		if w.root != "/" {
			rel = rel[1:]
		} else if len(rel) > 0 && rel[0] == '/' {
			rel = rel[1:]
		}
		snap[rel] = fi
	})
	return snap, err
}

// diff returns the events that lead from old to cur.
func (h *handler) diff(w watchSpec, old, cur snapshot) []filesystemEvent {
	var evs []filesystemEvent
	ev := func(name, typ string, fi *agent.FileInfo) {
		e := filesystemEvent{Name: name, Type: typ}
		if w.includeEntry && fi != nil {
			e.Entry = h.entry(path.Join(w.root, name), *fi)
		}
		evs = append(evs, e)
	}
	for _, name := range slices.Sorted(maps.Keys(cur)) {
		fi := cur[name]
		was, ok := old[name]
		switch {
		case !ok:
			ev(name, "EVENT_TYPE_CREATE", &fi)
		case was.Size != fi.Size || !was.ModTime.Equal(fi.ModTime) || was.IsDir != fi.IsDir || was.Link != fi.Link:
			ev(name, "EVENT_TYPE_WRITE", &fi)
		case was.Mode != fi.Mode || was.UID != fi.UID || was.GID != fi.GID:
			ev(name, "EVENT_TYPE_CHMOD", &fi)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(old)) {
		if _, ok := cur[name]; !ok {
			ev(name, "EVENT_TYPE_REMOVE", nil)
		}
	}
	return evs
}

type watchRequest struct {
	Path               string `json:"path"`
	Recursive          bool   `json:"recursive"`
	IncludeEntry       bool   `json:"includeEntry"`
	AllowNetworkMounts bool   `json:"allowNetworkMounts"`
}

// watchSpecOf checks a watch request.
func (h *handler) watchSpecOf(ctx context.Context, b *box, r *http.Request, body []byte) (watchSpec, error) {
	var req watchRequest
	_, p, err := h.pathRequest(r, body, &req, &req.Path)
	if err != nil {
		return watchSpec{}, err
	}
	fi, err := b.agent.Stat(ctx, p)
	if err != nil {
		return watchSpec{}, fmt.Errorf("watch %s: %w", p, err)
	}
	if !fi.IsDir {
		return watchSpec{}, errorf(codeInvalidArgument, "watch %s: not a directory", p)
	}
	return watchSpec{root: p, recursive: req.Recursive, includeEntry: req.IncludeEntry}, nil
}

type watchResponse struct {
	Start      *struct{}        `json:"start,omitempty"`
	Filesystem *filesystemEvent `json:"filesystem,omitempty"`
	Keepalive  *struct{}        `json:"keepalive,omitempty"`
}

func (h *handler) fsWatchDir(ctx context.Context, b *box, r *http.Request, body []byte, s *stream) error {
	w, err := h.watchSpecOf(ctx, b, r, body)
	if err != nil {
		return err
	}
	snap, err := w.snapshot(ctx, b)
	if err != nil {
		return fmt.Errorf("watch %s: %w", w.root, err)
	}
	if err := s.send(watchResponse{Start: &struct{}{}}); err != nil {
		return err
	}
	poll := time.NewTicker(watchInterval)
	defer poll.Stop()
	var tick <-chan time.Time
	if d := keepaliveInterval(r); d > 0 {
		t := time.NewTicker(d)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick:
			if err := s.send(watchResponse{Keepalive: &struct{}{}}); err != nil {
				return err
			}
		case <-poll.C:
			cur, err := w.snapshot(ctx, b)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return errorf(codeNotFound, "watch %s: the directory was removed", w.root)
				}
				return fmt.Errorf("watch %s: %w", w.root, err)
			}
			for _, ev := range h.diff(w, snap, cur) {
				if err := s.send(watchResponse{Filesystem: &ev}); err != nil {
					return err
				}
			}
			snap = cur
		}
	}
}

// watcher is a watch whose events are read with GetWatcherEvents: each
// read compares the directory with what the previous one saw.
type watcher struct {
	spec watchSpec
	snap snapshot
}

func (h *handler) fsCreateWatcher(ctx context.Context, b *box, r *http.Request, body []byte) (any, error) {
	w, err := h.watchSpecOf(ctx, b, r, body)
	if err != nil {
		return nil, err
	}
	snap, err := w.snapshot(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", w.root, err)
	}
	var idb [12]byte
	_, _ = rand.Read(idb[:])
	id := hex.EncodeToString(idb[:])
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.watchers) >= maxWatchers {
		return nil, errorf(codeResourceExhausted, "create watcher: %d watchers exist", len(b.watchers))
	}
	b.watchers[id] = &watcher{spec: w, snap: snap}
	return struct {
		WatcherID string `json:"watcherId"`
	}{id}, nil
}

func (b *box) watcher(id string) (*watcher, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.watchers[id]
	if w == nil {
		return nil, errorf(codeNotFound, "watcher %.64q not found", id)
	}
	return w, nil
}

func (h *handler) fsGetWatcherEvents(ctx context.Context, b *box, _ *http.Request, body []byte) (any, error) {
	var req struct {
		WatcherID string `json:"watcherId"`
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	w, err := b.watcher(req.WatcherID)
	if err != nil {
		return nil, err
	}
	cur, err := w.spec.snapshot(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", w.spec.root, err)
	}
	b.mu.Lock()
	evs := h.diff(w.spec, w.snap, cur)
	w.snap = cur
	b.mu.Unlock()
	if len(evs) > maxWatcherEvents {
		evs = evs[:maxWatcherEvents]
	}
	if evs == nil {
		evs = []filesystemEvent{}
	}
	return struct {
		Events []filesystemEvent `json:"events"`
	}{evs}, nil
}

func (h *handler) fsRemoveWatcher(_ context.Context, b *box, _ *http.Request, body []byte) (any, error) {
	var req struct {
		WatcherID string `json:"watcherId"`
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.watchers[req.WatcherID] == nil {
		return nil, errorf(codeNotFound, "watcher %.64q not found", req.WatcherID)
	}
	delete(b.watchers, req.WatcherID)
	return struct{}{}, nil
}
