# find_package(loadctl) support: `make install PREFIX=/opt/loadctl` puts this file in
# ${PREFIX}/lib/cmake/loadctl/. Then, in a C project:
#   find_package(loadctl REQUIRED)
#   target_link_libraries(my_proxy PRIVATE loadctl::loadctl)
get_filename_component(_loadctl_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET loadctl::loadctl)
  add_library(loadctl::loadctl STATIC IMPORTED)
  set_target_properties(loadctl::loadctl PROPERTIES
    IMPORTED_LOCATION "${_loadctl_prefix}/lib/libloadctl.a"
    INTERFACE_INCLUDE_DIRECTORIES "${_loadctl_prefix}/include"
    INTERFACE_LINK_LIBRARIES "pthread;dl;m")
endif()
set(loadctl_FOUND TRUE)
