#pragma once
// The merge loop shared by the SPM and BPE tokenizers. Symbols form a linked list over one word;
// candidate pairs of neighbours wait in a heap; the best one is taken and, unless it is stale (a
// side was merged into something else since it was offered), the right symbol joins the left one
// and the two new neighbour pairs are offered.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvtax::tok {

// Symbol needs int32_t prev, next (-1 at the ends) and uint32_t len (0 = merged away); Candidate needs
// int32_t left, right. `heap_order` is the heap comparator (its top is the best candidate).
// make(l, r, out): fills a candidate for neighbours l, r and returns true if the pair can merge.
// accept(c, left, right): false if c no longer describes the pair; otherwise updates left's payload.
template <class Symbol, class Candidate, class HeapOrder, class Make, class Accept>
void merge_symbols(std::vector<Symbol>& sym, std::vector<Candidate>& heap, HeapOrder heap_order, Make make,
                   Accept accept) {
  const auto offer = [&](int32_t l, int32_t r) {
    Candidate c{};
    if (l < 0 || r < 0 || !make(l, r, c)) return;
    heap.push_back(c);
    std::push_heap(heap.begin(), heap.end(), heap_order);
  };
  heap.clear();
  for (int32_t i = 1; i < int32_t(sym.size()); ++i) offer(i - 1, i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), heap_order);
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& l = sym[size_t(c.left)];
    Symbol& r = sym[size_t(c.right)];
    if (l.len == 0 || r.len == 0 || l.next != c.right || !accept(c, l, r)) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = c.left;
    offer(l.prev, c.left);
    offer(c.left, l.next);
  }
}

}  // namespace kvtax::tok
