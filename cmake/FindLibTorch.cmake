# Locate LibTorch. Order: an explicit Torch_DIR / CMAKE_PREFIX_PATH, then the
# LIBTORCH environment variable (an unpacked LibTorch archive, as on clusters),
# then the PyTorch wheel of the python3 on PATH.
if(NOT Torch_DIR)
  if(DEFINED ENV{LIBTORCH})
    list(PREPEND CMAKE_PREFIX_PATH "$ENV{LIBTORCH}")
  endif()
  find_file(_trlx_torch_given TorchConfig.cmake PATH_SUFFIXES Torch share/cmake/Torch cmake/Torch NO_CACHE)
  if(NOT _trlx_torch_given)
    find_package(Python3 COMPONENTS Interpreter)
    if(Python3_Interpreter_FOUND)
      execute_process(
        COMMAND ${Python3_EXECUTABLE} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
        OUTPUT_VARIABLE _trlx_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
        ERROR_QUIET RESULT_VARIABLE _trlx_torch_rc)
      if(_trlx_torch_rc EQUAL 0 AND _trlx_torch_prefix)
        list(PREPEND CMAKE_PREFIX_PATH "${_trlx_torch_prefix}")
      endif()
    endif()
  endif()
endif()
# LibTorch's CMake package probes the local GPU to pick CUDA architectures and
# fails on machines without one (login nodes, CI). trlx compiles no CUDA
# kernels of its own, so any list will do; users may set their own.
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(ENV{TORCH_CUDA_ARCH_LIST} "8.0;9.0")
endif()

# A CUDA build of LibTorch (the default wheel) makes its CMake package require
# a CUDA toolkit, which a fresh machine or a CPU-only node does not have. trlx
# compiles no CUDA code, so there it links the libraries directly: the CUDA
# ones still load at run time and are used when a GPU is present.
find_file(_trlx_torch_config TorchConfig.cmake PATH_SUFFIXES Torch share/cmake/Torch cmake/Torch NO_CACHE)
find_program(_trlx_nvcc nvcc HINTS "$ENV{CUDA_HOME}/bin" /usr/local/cuda/bin NO_CACHE)
set(TRLX_TORCH_WITHOUT_TOOLKIT OFF)
if(_trlx_torch_config)
  get_filename_component(_trlx_torch_root "${_trlx_torch_config}" DIRECTORY)
  get_filename_component(_trlx_torch_root "${_trlx_torch_root}/../../.." ABSOLUTE)
  if(EXISTS "${_trlx_torch_root}/lib/libtorch_cuda.so" AND (NOT _trlx_nvcc OR TRLX_FORCE_NO_CUDA_TOOLKIT))
    set(TRLX_TORCH_WITHOUT_TOOLKIT ON)
  endif()
endif()

# The defines LibTorch's CMake package gives a target of its own
# (Caffe2Targets.cmake): the headers must see what the libraries were built with.
function(_trlx_torch_target_defines target out)
  set(_defs)
  file(GLOB _targets_files "${TORCH_INSTALL_PREFIX}/share/cmake/Caffe2/Caffe2Targets.cmake")
  if(_targets_files)
    file(READ "${_targets_files}" _text)
    string(REGEX MATCH "set_target_properties\\(${target} PROPERTIES[^)]*INTERFACE_COMPILE_DEFINITIONS \"([^\"]*)\"" _m "${_text}")
    set(_defs "${CMAKE_MATCH_1}")
  endif()
  set(${out} "${_defs}" PARENT_SCOPE)
endfunction()

if(TRLX_TORCH_WITHOUT_TOOLKIT)
  set(TORCH_INSTALL_PREFIX "${_trlx_torch_root}")
  add_library(trlx_libtorch INTERFACE)
  target_include_directories(trlx_libtorch SYSTEM INTERFACE "${TORCH_INSTALL_PREFIX}/include"
                                                            "${TORCH_INSTALL_PREFIX}/include/torch/csrc/api/include")
  set(_trlx_torch_libs)
  foreach(_l torch torch_cpu c10 torch_cuda c10_cuda)
    if(EXISTS "${TORCH_INSTALL_PREFIX}/lib/lib${_l}.so")
      list(APPEND _trlx_torch_libs "${TORCH_INSTALL_PREFIX}/lib/lib${_l}.so")
    endif()
  endforeach()
  _trlx_torch_target_defines(torch_cpu _trlx_cpu_defs)
  _trlx_torch_target_defines(torch_cuda _trlx_cuda_defs)
  target_compile_definitions(trlx_libtorch INTERFACE ${_trlx_cpu_defs})
  # The NCCL communicator needs NCCL's and the CUDA runtime's headers, which
  # the wheel's nvidia packages carry (nvidia/nccl, nvidia/cu13 or
  # nvidia/cuda_runtime): with them no CUDA toolkit is needed.
  get_filename_component(_trlx_site "${TORCH_INSTALL_PREFIX}/.." ABSOLUTE)
  file(GLOB _trlx_nccl_h "${_trlx_site}/nvidia/*/include/nccl.h")
  file(GLOB _trlx_cudart_h "${_trlx_site}/nvidia/*/include/cuda_runtime_api.h")
  file(GLOB _trlx_nccl_so "${_trlx_site}/nvidia/nccl/lib/libnccl.so*")
  file(GLOB _trlx_cudart_so "${_trlx_site}/nvidia/*/lib/libcudart.so*")
  if("USE_C10D_NCCL" IN_LIST _trlx_cuda_defs AND _trlx_nccl_h AND _trlx_cudart_h AND _trlx_nccl_so AND _trlx_cudart_so)
    list(GET _trlx_nccl_h 0 _trlx_nccl_h)
    list(GET _trlx_cudart_h 0 _trlx_cudart_h)
    list(GET _trlx_nccl_so 0 _trlx_nccl_so)
    list(GET _trlx_cudart_so 0 _trlx_cudart_so)
    get_filename_component(_trlx_nccl_inc "${_trlx_nccl_h}" DIRECTORY)
    get_filename_component(_trlx_cudart_inc "${_trlx_cudart_h}" DIRECTORY)
    target_include_directories(trlx_libtorch SYSTEM INTERFACE "${_trlx_cudart_inc}" "${_trlx_nccl_inc}")
    target_compile_definitions(trlx_libtorch INTERFACE ${_trlx_cuda_defs})
    list(APPEND _trlx_torch_libs "${_trlx_nccl_so}" "${_trlx_cudart_so}")
    set(TRLX_NCCL "yes (the wheel's NCCL headers, ${_trlx_nccl_inc})")
  elseif("USE_C10D_NCCL" IN_LIST _trlx_cuda_defs)
    set(TRLX_NCCL "no: this LibTorch has NCCL but its headers are not beside it (nvidia/nccl/include); install the CUDA toolkit or the nvidia-nccl wheel")
  else()
    set(TRLX_NCCL "no: this LibTorch was built without NCCL")
  endif()
  # --no-as-needed: nothing calls libtorch_cuda directly, but loading it is
  # what registers the CUDA backend.
  target_link_libraries(trlx_libtorch INTERFACE "-Wl,--no-as-needed" ${_trlx_torch_libs} "-Wl,--as-needed")
  set(TORCH_LIBRARIES trlx_libtorch)
  message(STATUS "LibTorch from ${TORCH_INSTALL_PREFIX} (a CUDA build, and no CUDA toolkit here: linked directly)")
else()
  find_package(Torch REQUIRED)
  message(STATUS "LibTorch ${Torch_VERSION} from ${TORCH_INSTALL_PREFIX}")
  set(TRLX_NCCL "no: this LibTorch was built without NCCL")
  if(TARGET torch_cuda)
    get_target_property(_trlx_cuda_defs torch_cuda INTERFACE_COMPILE_DEFINITIONS)
    if("USE_C10D_NCCL" IN_LIST _trlx_cuda_defs)
      set(TRLX_NCCL "yes (through the CUDA toolkit)")
    endif()
  endif()
endif()
message(STATUS "NCCL communicator (multi-GPU): ${TRLX_NCCL}")

# The oldest LibTorch trlx is built and tested against (c10d's Store::clone,
# ProcessGroupNCCL's options, the header-only dtype headers; what 2.15
# renamed, c10d's flat collectives and autograd's node handles, is taken as
# each version names it).
set(TRLX_MIN_LIBTORCH 2.11 CACHE STRING "The oldest LibTorch version accepted")
set(_trlx_torch_version_lines)
foreach(_f torch/headeronly/version.h torch/csrc/api/include/torch/version.h)
  if(NOT _trlx_torch_version_lines AND EXISTS "${TORCH_INSTALL_PREFIX}/include/${_f}")
    file(STRINGS "${TORCH_INSTALL_PREFIX}/include/${_f}" _trlx_torch_version_lines
         REGEX "#define TORCH_VERSION_(MAJOR|MINOR) ")
  endif()
endforeach()
string(REGEX REPLACE ".*TORCH_VERSION_MAJOR ([0-9]+).*" "\\1" _trlx_major "${_trlx_torch_version_lines}")
string(REGEX REPLACE ".*TORCH_VERSION_MINOR ([0-9]+).*" "\\1" _trlx_minor "${_trlx_torch_version_lines}")
set(TRLX_LIBTORCH_VERSION "${_trlx_major}.${_trlx_minor}")
if(TRLX_LIBTORCH_VERSION VERSION_LESS TRLX_MIN_LIBTORCH)
  message(FATAL_ERROR "LibTorch ${TRLX_LIBTORCH_VERSION} at ${TORCH_INSTALL_PREFIX} is older than ${TRLX_MIN_LIBTORCH}, "
                      "the oldest trlx is built and tested against: install a newer PyTorch wheel "
                      "(python3 -m pip install -U torch) or point LIBTORCH at a newer archive")
endif()

# A LibTorch from the wheel finds its CUDA libraries (NCCL, cuDNN, cuBLAS, ...)
# in the wheel's nvidia/*/lib folders. A CUDA toolkit on the machine may carry
# older copies of the same libraries; put the wheel's folders first, both for
# the linker and at run time.
set(TRLX_TORCH_LINK_OPTIONS)
get_filename_component(_trlx_site "${TORCH_INSTALL_PREFIX}/.." ABSOLUTE)
file(GLOB _trlx_nv_dirs LIST_DIRECTORIES true "${_trlx_site}/nvidia/*/lib")
foreach(_d "${TORCH_INSTALL_PREFIX}/lib" ${_trlx_nv_dirs})
  if(IS_DIRECTORY "${_d}")
    list(APPEND TRLX_TORCH_LINK_OPTIONS "LINKER:-rpath,${_d}" "LINKER:-rpath-link,${_d}")
  endif()
endforeach()
