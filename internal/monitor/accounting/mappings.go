package accounting

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/internal/statedir"
)

// mappings keeps state files mapped between reads: unmapping is the dominant
// cost of a scrape (each munmap is a TLB shootdown across the process's
// threads). A mapping is reused while its path still names the same inode;
// a replaced or vanished file is unmapped.
type mappings struct {
	mu      sync.Mutex
	regions map[string]*mapped[*region.Region]
	limitsM map[string]*mapped[*region.Limits]
}

type mapped[T interface{ Close() error }] struct {
	id   fileID
	file T
}

// fileID tells a file apart from its replacement, and a file that changed
// size (shrunk under the mapping) from the one that was mapped.
type fileID struct{ dev, ino, size uint64 }

func identityOf(path string) (fileID, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	id := fileID{size: uint64(st.Size())}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = sys.Dev, sys.Ino
	}
	return id, nil
}

func get[T interface{ Close() error }](mu *sync.Mutex, m *map[string]*mapped[T], path string, open func(string) (T, error)) (T, error) {
	var zero T
	id, err := identityOf(path)
	if err != nil {
		return zero, err
	}
	mu.Lock()
	defer mu.Unlock()
	if *m == nil {
		*m = map[string]*mapped[T]{}
	}
	if c := (*m)[path]; c != nil {
		if c.id == id {
			return c.file, nil
		}
		c.file.Close()
		delete(*m, path)
	}
	f, err := open(path)
	if err != nil {
		return zero, err
	}
	(*m)[path] = &mapped[T]{id: id, file: f}
	return f, nil
}

func (m *mappings) region(path string) (*region.Region, error) {
	return get(&m.mu, &m.regions, path, region.OpenRegion)
}

func (m *mappings) limits(path string) (*region.Limits, error) {
	return get(&m.mu, &m.limitsM, path, region.OpenLimits)
}

// drop unmaps a file that faulted (it shrank): the next read maps it afresh
// and checks its size.
func (m *mappings) drop(path string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.regions[path]; c != nil {
		c.file.Close()
		delete(m.regions, path)
	}
	if c := m.limitsM[path]; c != nil {
		c.file.Close()
		delete(m.limitsM, path)
	}
}

// keepOnly unmaps the files of entries that no longer exist.
func (m *mappings) keepOnly(entries []statedir.Entry) {
	present := map[string]bool{}
	for _, e := range entries {
		present[e.Dir] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for path, c := range m.regions {
		if !present[filepath.Dir(path)] {
			c.file.Close()
			delete(m.regions, path)
		}
	}
	for path, c := range m.limitsM {
		if !present[filepath.Dir(path)] {
			c.file.Close()
			delete(m.limitsM, path)
		}
	}
}
