#include "common/workspace_scope.h"

namespace flashattn {

namespace {
thread_local const WorkspaceAllocator* current_allocator = nullptr;
}  // namespace

const WorkspaceAllocator* current_workspace_allocator() { return current_allocator; }

WorkspaceScope::WorkspaceScope(const WorkspaceAllocator& allocator) : previous_(current_allocator) {
  current_allocator = allocator.allocate != nullptr ? &allocator : nullptr;
}

WorkspaceScope::~WorkspaceScope() { current_allocator = previous_; }

}  // namespace flashattn
