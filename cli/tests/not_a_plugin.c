/* A shared library without the plug-in symbol, for the loader's error path. */
int mhc_not_a_plugin_marker(void) {
  return 1;
}
