# Apache Arrow and Parquet C++ for reading Parquet and Arrow datasets, taken
# from the pyarrow wheel (it ships the headers and libarrow/libparquet; no
# system package of Arrow is needed). Defines the imported targets
# trlx_arrow::arrow and trlx_arrow::parquet and TRLX_WITH_ARROW.
#
# Where pyarrow is: TRLX_ARROW_INCLUDE_DIR and TRLX_ARROW_LIB_DIR when set
# (scripts/setup.sh passes them), else asked of Python3_EXECUTABLE (the
# interpreter that has torch) or python3.
#
# The wheel names its libraries only libarrow.so.<ABI> (no unversioned
# libarrow.so), so they are linked by their full path; the build RPATH then
# holds the wheel's directory and the binary runs without LD_LIBRARY_PATH.
# Without pyarrow trlx still builds: Parquet and Arrow files are then refused
# with a message saying how to get a build that reads them.
option(TRLX_WITH_ARROW "Read Parquet and Arrow datasets (Apache Arrow C++ from the pyarrow wheel)" ON)
set(TRLX_ARROW_INCLUDE_DIR "" CACHE PATH "pyarrow's include directory (pyarrow.get_include())")
set(TRLX_ARROW_LIB_DIR "" CACHE PATH "The directory of pyarrow's libarrow/libparquet (pyarrow.get_library_dirs())")

if(TRLX_WITH_ARROW AND (NOT TRLX_ARROW_INCLUDE_DIR OR NOT TRLX_ARROW_LIB_DIR))
  if(Python3_EXECUTABLE)
    set(_trlx_arrow_py "${Python3_EXECUTABLE}")
  else()
    find_program(_trlx_arrow_python3 python3 NO_CACHE)
    set(_trlx_arrow_py "${_trlx_arrow_python3}")
  endif()
  if(_trlx_arrow_py)
    execute_process(
      COMMAND "${_trlx_arrow_py}" -c "import pyarrow as pa; print(pa.get_include()); print(pa.get_library_dirs()[0])"
      OUTPUT_VARIABLE _trlx_arrow_out OUTPUT_STRIP_TRAILING_WHITESPACE
      ERROR_QUIET RESULT_VARIABLE _trlx_arrow_rc)
    if(_trlx_arrow_rc EQUAL 0)
      string(REPLACE "\n" ";" _trlx_arrow_out "${_trlx_arrow_out}")
      list(GET _trlx_arrow_out 0 _trlx_arrow_inc)
      list(GET _trlx_arrow_out 1 _trlx_arrow_lib)
      if(NOT TRLX_ARROW_INCLUDE_DIR)
        set(TRLX_ARROW_INCLUDE_DIR "${_trlx_arrow_inc}" CACHE PATH "" FORCE)
      endif()
      if(NOT TRLX_ARROW_LIB_DIR)
        set(TRLX_ARROW_LIB_DIR "${_trlx_arrow_lib}" CACHE PATH "" FORCE)
      endif()
    endif()
  endif()
endif()

# A library of the wheel: lib<name>.so if present, else lib<name>.so.<digits>.
function(_trlx_arrow_library out name)
  set(${out} "" PARENT_SCOPE)
  if(EXISTS "${TRLX_ARROW_LIB_DIR}/lib${name}.so")
    set(${out} "${TRLX_ARROW_LIB_DIR}/lib${name}.so" PARENT_SCOPE)
    return()
  endif()
  file(GLOB _candidates "${TRLX_ARROW_LIB_DIR}/lib${name}.so.*")
  foreach(_c ${_candidates})
    get_filename_component(_n "${_c}" NAME)
    if(_n MATCHES "^lib${name}\\.so\\.[0-9]+$")
      set(${out} "${_c}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
endfunction()

if(TRLX_WITH_ARROW)
  set(_trlx_arrow_ok OFF)
  if(TRLX_ARROW_INCLUDE_DIR AND EXISTS "${TRLX_ARROW_INCLUDE_DIR}/parquet/arrow/reader.h"
     AND EXISTS "${TRLX_ARROW_INCLUDE_DIR}/arrow/util/config.h")
    _trlx_arrow_library(_trlx_libarrow arrow)
    _trlx_arrow_library(_trlx_libparquet parquet)
    if(_trlx_libarrow AND _trlx_libparquet)
      set(_trlx_arrow_ok ON)
    endif()
  endif()
  if(_trlx_arrow_ok)
    file(STRINGS "${TRLX_ARROW_INCLUDE_DIR}/arrow/util/config.h" _trlx_arrow_version
         REGEX "^#define ARROW_VERSION_STRING")
    string(REGEX REPLACE ".*\"(.*)\".*" "\\1" _trlx_arrow_version "${_trlx_arrow_version}")
    add_library(trlx_arrow::arrow SHARED IMPORTED)
    set_target_properties(trlx_arrow::arrow PROPERTIES IMPORTED_LOCATION "${_trlx_libarrow}"
      INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${TRLX_ARROW_INCLUDE_DIR}"
      INTERFACE_INCLUDE_DIRECTORIES "${TRLX_ARROW_INCLUDE_DIR}")
    add_library(trlx_arrow::parquet SHARED IMPORTED)
    set_target_properties(trlx_arrow::parquet PROPERTIES IMPORTED_LOCATION "${_trlx_libparquet}"
      INTERFACE_LINK_LIBRARIES trlx_arrow::arrow)
    message(STATUS "Apache Arrow ${_trlx_arrow_version} (Parquet/Arrow datasets) from ${TRLX_ARROW_LIB_DIR}")
  else()
    message(WARNING "pyarrow not found (set TRLX_ARROW_INCLUDE_DIR/TRLX_ARROW_LIB_DIR, or `pip install pyarrow` "
                    "into the Python that has torch): this build will refuse Parquet and Arrow datasets")
    set(TRLX_WITH_ARROW OFF)
  endif()
endif()
