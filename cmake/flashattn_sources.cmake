# The library target: API + validation, the CPU backend, and (with CUDA) the GPU code.
file(GLOB FLASHATTN_API_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/api/*.cpp)
file(GLOB FLASHATTN_CPU_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/cpu/*.cpp)

# The CPU backend's tile loops vectorise; native code is the default because the library is built
# where it runs (tools/run.sh). Turn it off for binaries that travel (wheels, packages).
option(FLASHATTN_NATIVE "Compile the CPU backend for this machine's CPU (-march=native)" ON)
if(FLASHATTN_NATIVE)
  set(FLASHATTN_CPU_ARCH_FLAG -march=native)
else()
  set(FLASHATTN_CPU_ARCH_FLAG -march=x86-64-v2)
endif()

add_library(flashattn STATIC ${FLASHATTN_API_SOURCES} ${FLASHATTN_CPU_SOURCES})
add_library(flashattn::flashattn ALIAS flashattn)
target_include_directories(flashattn
  PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>
  PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(flashattn PUBLIC Threads::Threads)
target_compile_options(flashattn PRIVATE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Release>>:-O3>
  $<$<COMPILE_LANGUAGE:CXX>:${FLASHATTN_CPU_ARCH_FLAG}>)

# Internal headers for tests and the benchmark (they reach the CPU reference and src/common).
add_library(flashattn_internal INTERFACE)
target_include_directories(flashattn_internal INTERFACE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(flashattn_internal INTERFACE flashattn)

if(FLASHATTN_WITH_CUDA)
  file(GLOB FLASHATTN_FA2_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/cuda/*.cu ${PROJECT_SOURCE_DIR}/src/fa2/*.cu)
  file(GLOB FLASHATTN_SM90_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/arch/sm90/*.cu ${PROJECT_SOURCE_DIR}/src/fa3/*.cu)
  target_sources(flashattn PRIVATE ${FLASHATTN_FA2_SOURCES} ${FLASHATTN_SM90_SOURCES})
  # Targets per source: FLASHATTN_FA2_AS_SM80 (CMakeLists.txt) compiles the FA2 sources from
  # compute_80 into FLASHATTN_FA2_AS_SM80_CODE alone and gives their host code an A100's shared
  # memory (fa2/device_limits.h).
  set(FLASHATTN_FA2_GENCODE ${FLASHATTN_CUDA_GENCODE})
  if(FLASHATTN_FA2_AS_SM80)
    set(FLASHATTN_FA2_GENCODE "-gencode=arch=compute_80,code=${FLASHATTN_FA2_AS_SM80_CODE}")
    set_source_files_properties(${FLASHATTN_FA2_SOURCES} PROPERTIES COMPILE_DEFINITIONS FLASHATTN_FA2_AS_SM80=1)
    message(STATUS "flashattn: FA2 kernels as sm80 code for ${FLASHATTN_FA2_AS_SM80_CODE}, tiles as on sm80 (FLASHATTN_FA2_AS_SM80)")
  endif()
  set_property(SOURCE ${FLASHATTN_FA2_SOURCES} APPEND PROPERTY COMPILE_OPTIONS ${FLASHATTN_FA2_GENCODE})
  set_property(SOURCE ${FLASHATTN_SM90_SOURCES} APPEND PROPERTY COMPILE_OPTIONS ${FLASHATTN_CUDA_GENCODE})
  target_compile_definitions(flashattn PUBLIC FLASHATTN_WITH_CUDA=1)
  # Test builds: an mbarrier wait that spins for seconds traps (a lost arrival or a wrong expect-tx
  # count fails one test quickly instead of hanging the whole run). Off for shipped builds.
  option(FLASHATTN_HANG_TRAP "Trap in mbarrier waits that last over ~4 s (GPU test builds)" OFF)
  if(FLASHATTN_HANG_TRAP)
    target_compile_definitions(flashattn PUBLIC FLASHATTN_HANG_TRAP=1)
  endif()
  # Static cudart: the library loads on machines without a GPU or a CUDA runtime installed.
  target_link_libraries(flashattn PUBLIC CUDA::cudart_static)
  target_compile_options(flashattn PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-warn-spills --expt-relaxed-constexpr>)
endif()

include(GNUInstallDirs)
install(TARGETS flashattn EXPORT flashattnTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/flashattn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT flashattnTargets NAMESPACE flashattn:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashattn)
include(CMakePackageConfigHelpers)
file(WRITE ${PROJECT_BINARY_DIR}/flashattnConfig.cmake.in
  "@PACKAGE_INIT@\ninclude(CMakeFindDependencyMacro)\nfind_dependency(Threads)\n"
  "if(@FLASHATTN_WITH_CUDA@)\n  find_dependency(CUDAToolkit)\nendif()\n"
  "include(\${CMAKE_CURRENT_LIST_DIR}/flashattnTargets.cmake)\n")
configure_package_config_file(${PROJECT_BINARY_DIR}/flashattnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/flashattnConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashattn)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/flashattnConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/flashattnConfig.cmake ${PROJECT_BINARY_DIR}/flashattnConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashattn)
