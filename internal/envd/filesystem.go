package envd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hutch-sandbox/hutch/internal/agent"
	pb "github.com/hutch-sandbox/hutch/internal/envd/envdpb/filesystem"
)

const (
	// maxListEntries bounds the entries of one ListDir.
	maxListEntries = 100_000
	// maxDepth bounds the depth of ListDir.
	maxDepth = 64
	// maxWatchers bounds the watchers of one sandbox.
	maxWatchers = 64
	// maxWatcherEvents bounds the events a watcher keeps between reads.
	maxWatcherEvents = 10_000
	// maxLinks bounds the symlinks followed to resolve one path, as
	// Linux's own resolution does (40) and more.
	maxLinks = 255
)

// fileType is the filesystem.FileType of fi.
func fileType(fi agent.FileInfo) pb.FileType {
	switch {
	case fi.Mode&fs.ModeSymlink != 0:
		return pb.FileType_FILE_TYPE_SYMLINK
	case fi.IsDir:
		return pb.FileType_FILE_TYPE_DIRECTORY
	case fi.Mode.IsRegular():
		return pb.FileType_FILE_TYPE_FILE
	}
	return pb.FileType_FILE_TYPE_UNSPECIFIED
}

// entry describes fi, found at p. A symlink is described as envd does: its
// symlinkTarget the absolute path it resolves to, every link on the way
// followed, and its type and mode those of that target; a link that
// resolves to nothing (dangling, a loop) has its own path as target and
// no type.
func (h *handler) entry(ctx context.Context, b *box, p string, fi agent.FileInfo) *pb.EntryInfo {
	e := &pb.EntryInfo{
		Name:         path.Base(p),
		Type:         fileType(fi),
		Path:         p,
		Size:         fi.Size,
		Mode:         uint32(fi.Mode.Perm()),
		Permissions:  fi.Mode.String(),
		Owner:        h.ownerName(fi.UID, false),
		Group:        h.ownerName(fi.GID, true),
		ModifiedTime: timestamppb.New(fi.ModTime),
		Metadata:     fi.Xattrs,
	}
	if fi.Mode&fs.ModeSymlink != 0 {
		target, tfi, err := resolveLinks(ctx, b, p)
		if err != nil {
			target, e.Type, e.Mode = p, pb.FileType_FILE_TYPE_UNSPECIFIED, 0
		} else {
			e.Type, e.Mode = fileType(tfi), uint32(tfi.Mode.Perm())
		}
		e.SymlinkTarget = &target
	}
	return e
}

// resolveLinks resolves the absolute path p inside the sandbox as the
// kernel does, following every symlink (in the middle of the path and at
// its end, at most maxLinks), and returns the path it comes to, which has
// none, and what is there.
func resolveLinks(ctx context.Context, b *box, p string) (string, agent.FileInfo, error) {
	resolved, rest := "/", strings.TrimPrefix(p, "/")
	var fi agent.FileInfo
	var err error
	links := 0
	for err == nil && rest != "" {
		var elem string
		elem, rest, _ = strings.Cut(rest, "/")
		switch elem {
		case "", ".":
			continue
		case "..":
			resolved = path.Dir(resolved)
			continue
		}
		next := path.Join(resolved, elem)
		if fi, err = b.agent.Stat(ctx, next); err != nil {
			break
		}
		switch {
		case fi.Mode&fs.ModeSymlink != 0:
			if links++; links > maxLinks {
				return "", fi, errorf(codeFailedPrecondition, "%s: more than %d symlinks", p, maxLinks)
			}
			if path.IsAbs(fi.Link) {
				resolved = "/"
			}
			rest = fi.Link + "/" + rest
		case rest != "" && !fi.IsDir:
			return "", fi, errorf(codeInvalidArgument, "%s: %s is not a directory", p, next)
		default:
			resolved = next
		}
	}
	if err != nil {
		return "", fi, err
	}
	// What is there: ".." and a link to "/" leave fi describing another.
	fi, err = b.agent.Stat(ctx, resolved)
	return resolved, fi, err
}

// stat describes the file at p.
func (h *handler) stat(ctx context.Context, b *box, p string) (*pb.EntryInfo, error) {
	fi, err := b.agent.StatXattrs(ctx, p, metaPrefix)
	if err != nil {
		return nil, err
	}
	return h.entry(ctx, b, p, fi), nil
}

// userPath resolves p for the request's user, and returns both.
func (h *handler) userPath(ctx context.Context, b *box, hdr http.Header, p string) (user, string, error) {
	u, err := h.requestUser(ctx, b, hdr)
	if err != nil {
		return user{}, "", err
	}
	abs, err := resolvePath(u, p)
	if err != nil {
		return user{}, "", err
	}
	return u, abs, nil
}

func (h *handler) fsStat(ctx context.Context, b *box, hdr http.Header, req *pb.StatRequest) (*pb.StatResponse, error) {
	_, p, err := h.userPath(ctx, b, hdr, req.Path)
	if err != nil {
		return nil, err
	}
	e, err := h.stat(ctx, b, p)
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", p, err)
	}
	return &pb.StatResponse{Entry: e}, nil
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

func (h *handler) fsMakeDir(ctx context.Context, b *box, hdr http.Header, req *pb.MakeDirRequest) (*pb.MakeDirResponse, error) {
	u, p, err := h.userPath(ctx, b, hdr, req.Path)
	if err != nil {
		return nil, err
	}
	auditPaths(ctx, p)
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
	return &pb.MakeDirResponse{Entry: e}, nil
}

func (h *handler) fsMove(ctx context.Context, b *box, hdr http.Header, req *pb.MoveRequest) (*pb.MoveResponse, error) {
	u, src, err := h.userPath(ctx, b, hdr, req.Source)
	if err != nil {
		return nil, err
	}
	dst, err := resolvePath(u, req.Destination)
	if err != nil {
		return nil, err
	}
	auditPaths(ctx, src, dst)
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
	return &pb.MoveResponse{Entry: e}, nil
}

func (h *handler) fsRemove(ctx context.Context, b *box, hdr http.Header, req *pb.RemoveRequest) (*pb.RemoveResponse, error) {
	_, p, err := h.userPath(ctx, b, hdr, req.Path)
	if err != nil {
		return nil, err
	}
	auditPaths(ctx, p)
	// As envd's (os.RemoveAll): a path that does not exist is removed.
	if err := b.agent.Remove(ctx, p, true); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove %s: %w", p, err)
	}
	return &pb.RemoveResponse{}, nil
}

// walk lists directory p down to depth levels (1: its entries), calling f
// for each entry; directories are listed, symlinks not followed.
func walk(ctx context.Context, b *box, p string, depth int, count *int, f func(string, agent.FileInfo)) error {
	ents, err := b.agent.ListXattrs(ctx, p, metaPrefix)
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

func (h *handler) fsListDir(ctx context.Context, b *box, hdr http.Header, req *pb.ListDirRequest) (*pb.ListDirResponse, error) {
	_, p, err := h.userPath(ctx, b, hdr, req.Path)
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
	out := &pb.ListDirResponse{}
	count := 0
	if err := walk(ctx, b, p, depth, &count, func(q string, fi agent.FileInfo) {
		out.Entries = append(out.Entries, h.entry(ctx, b, q, fi))
	}); err != nil {
		return nil, fmt.Errorf("list %s: %w", p, err)
	}
	return out, nil
}

// watchSpec is what a watch watches.
type watchSpec struct {
	root         string
	recursive    bool
	includeEntry bool
}

// eventTypes are the filesystem.EventType of the agent's watch events.
var eventTypes = map[string]pb.EventType{
	agent.WatchCreate: pb.EventType_EVENT_TYPE_CREATE,
	agent.WatchWrite:  pb.EventType_EVENT_TYPE_WRITE,
	agent.WatchRemove: pb.EventType_EVENT_TYPE_REMOVE,
	agent.WatchRename: pb.EventType_EVENT_TYPE_RENAME,
	agent.WatchChmod:  pb.EventType_EVENT_TYPE_CHMOD,
}

// errEventsLost is the error of a watch that lost events.
func errEventsLost(root string) error {
	return errorf(codeResourceExhausted, "watch %s: events were lost (too many changes)", root)
}

// errWatchGone is the error of a watch whose directory went away.
func errWatchGone(root string) error {
	return errorf(codeNotFound, "watch %s: the directory was removed or moved", root)
}

// convert turns the agent's events into E2B's, describing the files
// created or changed if w.includeEntry. It returns an error once the
// watch cannot go on: events were lost, or the directory went away.
func (h *handler) convert(ctx context.Context, b *box, w watchSpec, evs []agent.WatchEvent) ([]*pb.FilesystemEvent, error) {
	out := make([]*pb.FilesystemEvent, 0, len(evs))
	for _, ev := range evs {
		switch {
		case ev.Op == agent.WatchOverflow:
			return out, errEventsLost(w.root)
		case ev.Path == "":
			return out, errWatchGone(w.root)
		}
		e := &pb.FilesystemEvent{Name: ev.Path, Type: eventTypes[ev.Op]}
		if w.includeEntry && (ev.Op == agent.WatchCreate || ev.Op == agent.WatchWrite || ev.Op == agent.WatchChmod) {
			p := path.Join(w.root, ev.Path)
			if fi, err := b.agent.StatXattrs(ctx, p, metaPrefix); err == nil {
				e.Entry = h.entry(ctx, b, p, fi)
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// watchRequest is what WatchDir and CreateWatcher ask for.
type watchRequest interface {
	GetPath() string
	GetRecursive() bool
	GetIncludeEntry() bool
}

// startWatch checks a watch request and starts the agent's watch.
func (h *handler) startWatch(ctx context.Context, b *box, hdr http.Header, req watchRequest) (watchSpec, *agent.Watch, error) {
	_, p, err := h.userPath(ctx, b, hdr, req.GetPath())
	if err != nil {
		return watchSpec{}, nil, err
	}
	fi, err := b.agent.Stat(ctx, p)
	if err != nil {
		return watchSpec{}, nil, fmt.Errorf("watch %s: %w", p, err)
	}
	if !fi.IsDir {
		return watchSpec{}, nil, errorf(codeInvalidArgument, "watch %s: not a directory", p)
	}
	w := watchSpec{root: p, recursive: req.GetRecursive(), includeEntry: req.GetIncludeEntry()}
	aw, err := b.agent.Watch(ctx, p, w.recursive)
	if err != nil {
		return watchSpec{}, nil, fmt.Errorf("watch %s: %w", p, err)
	}
	return w, aw, nil
}

func (h *handler) fsWatchDir(ctx context.Context, b *box, hdr http.Header, req *pb.WatchDirRequest, send func(*pb.WatchDirResponse) error) error {
	w, aw, err := h.startWatch(ctx, b, hdr, req)
	if err != nil {
		return err
	}
	defer aw.Stop()
	if err := send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Start{Start: &pb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	type batch struct {
		evs []agent.WatchEvent
		err error
	}
	batches := make(chan batch)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			evs, err := aw.Next(ctx)
			select {
			case batches <- batch{evs, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var tick <-chan time.Time
	if d := keepaliveInterval(hdr); d > 0 {
		t := time.NewTicker(d)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick:
			if err := send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Keepalive{Keepalive: &pb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
		case bt := <-batches:
			if bt.err != nil {
				if errors.Is(bt.err, io.EOF) {
					return errWatchGone(w.root)
				}
				return fmt.Errorf("watch %s: %w", w.root, bt.err)
			}
			evs, cerr := h.convert(ctx, b, w, bt.evs)
			for _, ev := range evs {
				if err := send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
					return err
				}
			}
			if cerr != nil {
				return cerr
			}
		}
	}
}

// watcher is a watch whose events are read with GetWatcherEvents: a
// goroutine collects them, at most maxWatcherEvents between two reads.
type watcher struct {
	stop func() // ends the watch and the goroutine

	mu     sync.Mutex
	events []*pb.FilesystemEvent
	err    error // why the watch ended, once it did
}

// collect gathers the events of aw until it ends.
func (h *handler) collect(ctx context.Context, b *box, spec watchSpec, aw *agent.Watch, wt *watcher) {
	for {
		evs, err := aw.Next(ctx)
		var fevs []*pb.FilesystemEvent
		if err == nil {
			fevs, err = h.convert(ctx, b, spec, evs)
		} else if errors.Is(err, io.EOF) {
			err = errWatchGone(spec.root)
		} else {
			err = fmt.Errorf("watch %s: %w", spec.root, err)
		}
		wt.mu.Lock()
		if len(wt.events)+len(fevs) > maxWatcherEvents {
			err = errEventsLost(spec.root)
			fevs = fevs[:maxWatcherEvents-len(wt.events)]
		}
		wt.events = append(wt.events, fevs...)
		if err != nil && wt.err == nil {
			wt.err = err
		}
		wt.mu.Unlock()
		if err != nil {
			aw.Stop()
			return
		}
	}
}

func (h *handler) fsCreateWatcher(ctx context.Context, b *box, hdr http.Header, req *pb.CreateWatcherRequest) (*pb.CreateWatcherResponse, error) {
	b.mu.Lock()
	n := len(b.watchers)
	b.mu.Unlock()
	if n >= maxWatchers {
		return nil, errorf(codeResourceExhausted, "create watcher: %d watchers exist", n)
	}
	spec, aw, err := h.startWatch(ctx, b, hdr, req)
	if err != nil {
		return nil, err
	}
	auditPaths(ctx, spec.root)
	var idb [12]byte
	_, _ = rand.Read(idb[:])
	id := hex.EncodeToString(idb[:])
	wctx, cancel := context.WithCancel(context.Background())
	wt := &watcher{stop: func() { cancel(); aw.Stop() }}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.watchers) >= maxWatchers {
		wt.stop()
		return nil, errorf(codeResourceExhausted, "create watcher: %d watchers exist", len(b.watchers))
	}
	b.watchers[id] = wt
	go h.collect(wctx, b, spec, aw, wt)
	return &pb.CreateWatcherResponse{WatcherId: id}, nil
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

// fsGetWatcherEvents returns the events collected since the previous
// call; once they are all returned, a watch that ended reports why.
func (h *handler) fsGetWatcherEvents(_ context.Context, b *box, _ http.Header, req *pb.GetWatcherEventsRequest) (*pb.GetWatcherEventsResponse, error) {
	w, err := b.watcher(req.WatcherId)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	evs, werr := w.events, w.err
	w.events = nil
	w.mu.Unlock()
	if len(evs) == 0 && werr != nil {
		return nil, werr
	}
	return &pb.GetWatcherEventsResponse{Events: evs}, nil
}

func (h *handler) fsRemoveWatcher(_ context.Context, b *box, _ http.Header, req *pb.RemoveWatcherRequest) (*pb.RemoveWatcherResponse, error) {
	b.mu.Lock()
	w := b.watchers[req.WatcherId]
	delete(b.watchers, req.WatcherId)
	b.mu.Unlock()
	if w == nil {
		return nil, errorf(codeNotFound, "watcher %.64q not found", req.WatcherId)
	}
	w.stop()
	return &pb.RemoveWatcherResponse{}, nil
}

// filesystemServer is filesystem.Filesystem, served by connect-go.
type filesystemServer struct{ h *handler }

func (s filesystemServer) Stat(ctx context.Context, req *connect.Request[pb.StatRequest]) (*connect.Response[pb.StatResponse], error) {
	return unaryCall(s.h, ctx, req, s.h.fsStat)
}

func (s filesystemServer) MakeDir(ctx context.Context, req *connect.Request[pb.MakeDirRequest]) (*connect.Response[pb.MakeDirResponse], error) {
	return unaryCall(s.h, ctx, req, s.h.fsMakeDir)
}

func (s filesystemServer) Move(ctx context.Context, req *connect.Request[pb.MoveRequest]) (*connect.Response[pb.MoveResponse], error) {
	return unaryCall(s.h, ctx, req, s.h.fsMove)
}

func (s filesystemServer) ListDir(ctx context.Context, req *connect.Request[pb.ListDirRequest]) (*connect.Response[pb.ListDirResponse], error) {
	return unaryCall(s.h, ctx, req, s.h.fsListDir)
}

func (s filesystemServer) Remove(ctx context.Context, req *connect.Request[pb.RemoveRequest]) (*connect.Response[pb.RemoveResponse], error) {
	return unaryCall(s.h, ctx, req, s.h.fsRemove)
}

func (s filesystemServer) WatchDir(ctx context.Context, req *connect.Request[pb.WatchDirRequest], st *connect.ServerStream[pb.WatchDirResponse]) error {
	return streamCall(s.h, ctx, req, st, s.h.fsWatchDir)
}

func (s filesystemServer) CreateWatcher(ctx context.Context, req *connect.Request[pb.CreateWatcherRequest]) (*connect.Response[pb.CreateWatcherResponse], error) {
	return unaryCall(s.h, ctx, req, s.h.fsCreateWatcher)
}

func (s filesystemServer) GetWatcherEvents(ctx context.Context, req *connect.Request[pb.GetWatcherEventsRequest]) (*connect.Response[pb.GetWatcherEventsResponse], error) {
	return unaryCall(s.h, ctx, req, s.h.fsGetWatcherEvents)
}

func (s filesystemServer) RemoveWatcher(ctx context.Context, req *connect.Request[pb.RemoveWatcherRequest]) (*connect.Response[pb.RemoveWatcherResponse], error) {
	return unaryCall(s.h, ctx, req, s.h.fsRemoveWatcher)
}
