package microvm

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// qmpTimeout bounds one command on QEMU's monitor, and qmpBudget what
// hutch reads of the monitor for one (its answer and the events before
// it): a QEMU that a guest took over may send anything, or nothing.
const (
	qmpTimeout = 30 * time.Second
	qmpBudget  = 1 << 20
)

// qmp is hutch's connection to QEMU's monitor (QMP, JSON lines), which
// QEMU makes as it starts, as it does the ports'. Its greeting is read
// and its capabilities negotiated at the first command.
type qmp struct {
	mu     sync.Mutex
	conn   net.Conn
	r      *budgetReader
	dec    *json.Decoder
	greets bool // the greeting was read and the capabilities negotiated
}

func newQMP(c net.Conn) *qmp {
	r := &budgetReader{c: c}
	return &qmp{conn: c, r: r, dec: json.NewDecoder(r)}
}

// do runs the QMP command cmd (without arguments) and waits for its
// answer.
func (q *qmp) do(cmd string) error {
	_, err := q.call(cmd, nil, nil)
	return err
}

// call runs the QMP command cmd with args (nil for none), with fd, when
// not nil, passed along (SCM_RIGHTS: getfd takes it), and returns its
// answer's return value.
func (q *qmp) call(cmd string, args any, fd *os.File) (json.RawMessage, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	_ = q.conn.SetDeadline(time.Now().Add(qmpTimeout))
	defer q.conn.SetDeadline(time.Time{})
	q.r.left = qmpBudget
	if !q.greets {
		var greeting struct {
			QMP json.RawMessage `json:"QMP"`
		}
		if err := q.dec.Decode(&greeting); err != nil {
			return nil, fmt.Errorf("QEMU's monitor: greeting: %w", err)
		}
		if greeting.QMP == nil {
			return nil, errors.New("QEMU's monitor: no greeting")
		}
		if _, err := q.exec("qmp_capabilities", nil, nil); err != nil {
			return nil, err
		}
		q.greets = true
	}
	return q.exec(cmd, args, fd)
}

// exec sends cmd (with args and fd, as call) and reads until its answer,
// skipping events.
func (q *qmp) exec(cmd string, args any, fd *os.File) (json.RawMessage, error) {
	msg := map[string]any{"execute": cmd}
	if args != nil {
		msg["arguments"] = args
	}
	b, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	b = append(b, '\n')
	if fd != nil {
		uc, ok := q.conn.(*net.UnixConn)
		if !ok {
			return nil, fmt.Errorf("QEMU's monitor: %s: no unix socket to pass a descriptor on", cmd)
		}
		_, _, err = uc.WriteMsgUnix(b, unix.UnixRights(int(fd.Fd())), nil)
	} else {
		_, err = q.conn.Write(b)
	}
	if err != nil {
		return nil, fmt.Errorf("QEMU's monitor: %s: %w", cmd, err)
	}
	for {
		var r struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Class string `json:"class"`
				Desc  string `json:"desc"`
			} `json:"error"`
		}
		if err := q.dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("QEMU's monitor: %s: %w", cmd, err)
		}
		switch {
		case r.Error != nil:
			return nil, fmt.Errorf("QEMU's monitor: %s: %s: %s", cmd, r.Error.Class, r.Error.Desc)
		case r.Return != nil:
			return r.Return, nil
		}
		// An event (STOP, RESUME, …): not the answer.
	}
}

// budgetReader reads from c at most left bytes, then fails.
type budgetReader struct {
	c    net.Conn
	left int
}

func (r *budgetReader) Read(b []byte) (int, error) {
	if r.left <= 0 {
		return 0, errors.New("more than hutch reads of it for one command")
	}
	if len(b) > r.left {
		b = b[:r.left]
	}
	n, err := r.c.Read(b)
	r.left -= n
	return n, err
}

// Pause stops the guest's virtual CPUs (QMP's stop): its processes and
// its kernel stand still, its memory kept, until Resume.
func (v *VM) Pause() error {
	if err := v.alive(); err != nil {
		return err
	}
	return v.qmp.do("stop")
}

// Resume lets the guest's virtual CPUs go on (QMP's cont).
func (v *VM) Resume() error {
	if err := v.alive(); err != nil {
		return err
	}
	return v.qmp.do("cont")
}

// alive fails once QEMU has exited.
func (v *VM) alive() error {
	select {
	case <-v.done:
		return errors.New("microvm: the VM has ended")
	default:
		return nil
	}
}
