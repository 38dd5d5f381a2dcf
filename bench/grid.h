// The shapes the benchmark runs: named grids, single shapes from the command line, and the
// work each shape represents (FLOPs, minimum bytes moved).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace flashattn::bench {

enum class Direction { Fwd, Bwd };
const char* direction_name(Direction direction);

// The cache of a case timed through fwd_kvcache (serving's decode step) instead of fwd.
struct KvCache {
  int64_t page_size = 0;  // 0: dense (batch, seqlen_k, heads_k, d); else pages of this many keys
                          //   found through a block_table
  bool append = false;    // the call appends seqlen_q new keys (k_new, v_new) at
                          //   cache_seqlens = seqlen_k - seqlen_q: it still sees seqlen_k keys
};

struct Shape {
  int64_t batch = 1;
  int64_t seqlen_q = 0;
  int64_t seqlen_k = 0;  // with a kvcache: the keys each query sees, appended ones included
  int64_t heads_q = 1;
  int64_t heads_k = 1;  // < heads_q: grouped-query attention
  int64_t head_dim = 64;
  bool causal = false;
  std::optional<KvCache> kvcache;  // set: fwd_kvcache over a cache, forward only
};

// One measurement to take: a shape in one direction.
struct Case {
  Shape shape;
  Direction direction = Direction::Fwd;
};

struct GridFilter {
  std::optional<bool> causal;        // only this causal setting (both when empty)
  std::optional<Direction> direction;  // only this direction (the grid's own set when empty)
};

// The machine a grid is sized for: the decode grid shrinks on the CPU, where a decode step over
// a GPU-sized cache takes seconds.
enum class Machine { Cpu, Gpu };

// "small", "peers" or "decode"; empty optional when the name is unknown.
std::optional<std::vector<Case>> named_grid(const std::string& name, const GridFilter& filter,
                                            Machine machine);
// The cases of one shape given on the command line (both causal settings and both directions
// unless the filter narrows them; a kvcache shape runs forward only).
std::vector<Case> single_shape_cases(Shape shape, const GridFilter& filter);
// "b,sq,sk,h,d" or "b,sq,sk,h,d,hk"; empty optional (and *error set) when malformed.
std::optional<Shape> parse_shape(const std::string& text, std::string* error);
const std::vector<std::string>& grid_names();
// "fwd b=8 sq=1 sk=32768 hq=32 hk=8 d=128 causal=1 kvcache page=16 append=0", for messages.
std::string describe_case(const Case& c);

// FLOPs by the project's reporting convention: forward 4*b*h*sq*sk*d, halved with a causal mask;
// backward 2.5x forward. A kvcache case counts 4*b*h*d per key each query row sees: with a few
// queries over a long cache the causal mask hides almost nothing, and halving would be wrong.
double flops(const Shape& shape, Direction direction);
// Bytes a perfect kernel must move: every input read once, every output written once. A kvcache
// case counts the K and V it reads only (see grid.cpp).
double min_bytes(const Shape& shape, Direction direction, std::size_t element_bytes);

}  // namespace flashattn::bench
