# Locate LibTorch. Order: an explicit Torch_DIR / CMAKE_PREFIX_PATH, then the
# LIBTORCH environment variable (an unpacked LibTorch archive, as on clusters),
# then the PyTorch wheel of the python3 on PATH.
if(NOT Torch_DIR)
  if(DEFINED ENV{LIBTORCH})
    list(PREPEND CMAKE_PREFIX_PATH "$ENV{LIBTORCH}")
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
find_package(Torch REQUIRED)
message(STATUS "LibTorch ${Torch_VERSION} from ${TORCH_INSTALL_PREFIX}")
# LibTorch adds its own flags (ABI, -D_GLIBCXX_USE_CXX11_ABI); keep them on the
# imported target only.
