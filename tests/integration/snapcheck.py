"""What PyTorch's memory viewer needs of a snapshot, checked without a browser.

The viewer (MemoryViz.js) places each block at its segment's address plus the sizes of the
blocks before it, and draws each event of "Allocator State History" by walking the history
backwards from the snapshot's layout: an alloc removes its block, a free puts it back, a
segment_map or segment_alloc removes the range it made, a segment_unmap or segment_free puts
it back (merged with a neighbour of the same stream). Anything it cannot find makes it throw.

layout_problems() and history_problems() say what would go wrong, in words; [] when nothing.
Written from that description of the viewer's rules, not from its code.
"""
import bisect

ACTIVE = ("active_allocated", "active_pending_free")


def layout_problems(data):
    """Every segment's blocks tile it from its address; segments do not overlap; no segment is
    empty (a segment is a mapped range)."""
    out = []
    for dev in {s["device"] for s in data["segments"]}:
        segs = sorted((s for s in data["segments"] if s["device"] == dev),
                      key=lambda s: s["address"])
        end = 0
        for s in segs:
            if s["total_size"] <= 0 or not s["blocks"]:
                out.append("device %d: empty segment at 0x%x" % (dev, s["address"]))
            if s["address"] < end:
                out.append("device %d: segment 0x%x overlaps the one before" % (dev, s["address"]))
            end = max(end, s["address"] + s["total_size"])
            at = s["address"]
            for b in s["blocks"]:
                if b["address"] != at:
                    out.append("device %d: block 0x%x is drawn at 0x%x (segment 0x%x)"
                               % (dev, b["address"], at, s["address"]))
                at += b["size"]
            if at != s["address"] + s["total_size"]:
                out.append("device %d: segment 0x%x: blocks span %d bytes, total_size %d"
                           % (dev, s["address"], at - s["address"], s["total_size"]))
    return out


class Ranges:
    """Disjoint address ranges [start, end) with a stream each, sorted by start."""

    def __init__(self, items):
        self.r = sorted([a, a + n, st] for a, n, st in items if n > 0)

    def find(self, addr):
        """Index of the range holding addr, or None."""
        i = bisect.bisect_right([x[0] for x in self.r], addr) - 1
        return i if i >= 0 and addr < self.r[i][1] else None

    def holds(self, addr, size):
        i = self.find(addr)
        return i is not None and addr + size <= self.r[i][1]

    def overlaps(self, addr, size):
        return any(a < addr + size and addr < e for a, e, _ in self.r)

    def add(self, addr, size, stream):
        """Put a range back, merged with an adjacent one of the same stream."""
        starts = [x[0] for x in self.r]
        i = bisect.bisect_left(starts, addr)
        self.r.insert(i, [addr, addr + size, stream])
        if i + 1 < len(self.r) and self.r[i][1] == self.r[i + 1][0] and \
                self.r[i + 1][2] == stream:
            self.r[i][1] = self.r.pop(i + 1)[1]
        if i > 0 and self.r[i - 1][1] == addr and self.r[i - 1][2] == stream:
            self.r[i - 1][1] = self.r.pop(i)[1]

    def cut(self, addr, size):
        """Take [addr, addr + size) out of the one range that holds it; False if none does."""
        i = self.find(addr)
        if i is None or addr + size > self.r[i][1]:
            return False
        a, e, st = self.r.pop(i)
        if e > addr + size:
            self.r.insert(i, [addr + size, e, st])
        if addr > a:
            self.r.insert(i, [a, addr, st])
        return True

    def remove_at(self, addr):
        """Drop the range starting at addr (a segment_alloc undone); False if none."""
        for i, x in enumerate(self.r):
            if x[0] == addr:
                self.r.pop(i)
                return True
        return False


def history_problems(data, device=0, limit=10):
    """Walk device's history backwards from the layout, as the viewer draws each event."""
    segs = [s for s in data["segments"] if s["device"] == device]
    ranges = Ranges((s["address"], s["total_size"], s["stream"]) for s in segs)
    live = {b["address"]: b["size"] for s in segs for b in s["blocks"] if b["state"] in ACTIVE}
    out = []

    def blocks_in(a, e):
        return [b for b in live if a <= b < e or (b < a and b + live[b] > a)]

    events = data["device_traces"][device] if device < len(data["device_traces"]) else []
    for i in range(len(events) - 1, -1, -1):
        if len(out) >= limit:
            break
        e = events[i]
        act, addr, size = e["action"], e.get("addr"), e["size"]
        where = "event %d (%s 0x%x)" % (i, act, addr or 0)
        if act == "alloc":
            if addr not in live:
                out.append(where + ": the block it allocated is not there")
            live.pop(addr, None)
        elif act == "free_completed":
            live[addr] = size
            if not ranges.holds(addr, size):
                out.append(where + ": the freed block lies outside every segment")
        elif act == "free_requested":
            if addr not in live:
                out.append(where + ": the block it frees is not there")
        elif act in ("segment_free", "segment_unmap"):
            if ranges.overlaps(addr, size):  # the viewer would draw both: memory twice
                out.append(where + ": puts back a range that is mapped already")
            ranges.add(addr, size, e["stream"])
        elif act in ("segment_alloc", "segment_map"):
            inside = blocks_in(addr, addr + size)
            ok = ranges.remove_at(addr) if act == "segment_alloc" else ranges.cut(addr, size)
            if not ok:
                out.append(where + ": no segment holds the range it made")
            elif inside:
                out.append(where + ": blocks at %s are left outside every segment"
                           % ", ".join("0x%x" % b for b in inside[:3]))
    return out
