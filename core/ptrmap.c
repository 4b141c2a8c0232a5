/* placeholder: being written */
int ts_placeholder_ptrmap(void);
int ts_placeholder_ptrmap(void) { return 0; }
