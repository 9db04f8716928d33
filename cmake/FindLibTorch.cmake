# Locate LibTorch. Order: an explicit Torch_DIR / CMAKE_PREFIX_PATH, then the
# LIBTORCH environment variable (an unpacked LibTorch archive, as on clusters),
# then the PyTorch wheel of the python3 on PATH.
if(NOT Torch_DIR)
  if(DEFINED ENV{LIBTORCH})
    list(PREPEND CMAKE_PREFIX_PATH "$ENV{LIBTORCH}")
  endif()
  if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(ENV{TORCH_CUDA_ARCH_LIST} "8.0;9.0")
  endif()
  find_package(Torch QUIET)
  if(NOT Torch_FOUND)
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
find_package(Torch REQUIRED)
message(STATUS "LibTorch ${Torch_VERSION} from ${TORCH_INSTALL_PREFIX}")
# LibTorch adds its own flags (ABI, -D_GLIBCXX_USE_CXX11_ABI); keep them on the
# imported target only.

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
