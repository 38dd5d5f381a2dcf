// The caller's workspace allocator for the GPU code of one API call: the entry point sets it for
// the call's duration on its thread, and StreamBuffer (common/cuda_status.h) allocates from it.
#pragma once

#include "flashattn/flashattn.h"

namespace flashattn {

// The allocator of the call running on this thread, or nullptr (the library's pool).
const WorkspaceAllocator* current_workspace_allocator();

class WorkspaceScope {
 public:
  explicit WorkspaceScope(const WorkspaceAllocator& allocator);
  ~WorkspaceScope();
  WorkspaceScope(const WorkspaceScope&) = delete;
  WorkspaceScope& operator=(const WorkspaceScope&) = delete;

 private:
  const WorkspaceAllocator* previous_;
};

}  // namespace flashattn
