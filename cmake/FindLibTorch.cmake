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
  # --no-as-needed: nothing calls libtorch_cuda directly, but loading it is
  # what registers the CUDA backend.
  target_link_libraries(trlx_libtorch INTERFACE "-Wl,--no-as-needed" ${_trlx_torch_libs} "-Wl,--as-needed")
  set(TORCH_LIBRARIES trlx_libtorch)
  message(STATUS "LibTorch from ${TORCH_INSTALL_PREFIX} (a CUDA build, and no CUDA toolkit here: linked directly)")
else()
  find_package(Torch REQUIRED)
  message(STATUS "LibTorch ${Torch_VERSION} from ${TORCH_INSTALL_PREFIX}")
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
