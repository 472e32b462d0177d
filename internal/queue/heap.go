package queue

// indexedHeap is a binary min-heap of entries that records each entry's
// position in the entry itself (slot picks which of its positions), so an
// entry can be removed from the middle in O(log n): a pod deleted while it
// waits, or one whose deadline passes while it sits in backoff.
type indexedHeap[T any] struct {
	items []*Entry[T]
	less  func(a, b *Entry[T]) bool
	slot  func(e *Entry[T]) *int
}

func (h *indexedHeap[T]) Len() int { return len(h.items) }

func (h *indexedHeap[T]) peek() *Entry[T] {
	if len(h.items) == 0 {
		return nil
	}
	return h.items[0]
}

func (h *indexedHeap[T]) push(e *Entry[T]) {
	*h.slot(e) = len(h.items)
	h.items = append(h.items, e)
	h.up(len(h.items) - 1)
}

func (h *indexedHeap[T]) pop() *Entry[T] {
	if len(h.items) == 0 {
		return nil
	}
	e := h.items[0]
	h.remove(e)
	return e
}

// remove takes e out; it must be in this heap.
func (h *indexedHeap[T]) remove(e *Entry[T]) {
	i := *h.slot(e)
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	h.items[last] = nil
	h.items = h.items[:last]
	*h.slot(e) = -1
	if i < last {
		if !h.down(i) {
			h.up(i)
		}
	}
}

func (h *indexedHeap[T]) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	*h.slot(h.items[i]) = i
	*h.slot(h.items[j]) = j
}

func (h *indexedHeap[T]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(h.items[i], h.items[p]) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

// down sifts i towards the leaves and reports whether it moved.
func (h *indexedHeap[T]) down(i int) bool {
	start, n := i, len(h.items)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && h.less(h.items[r], h.items[l]) {
			c = r
		}
		if !h.less(h.items[c], h.items[i]) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > start
}
