/* tests/integration/stack_notables.c -- a function built without unwind tables (its object
 * compiled with -fno-asynchronous-unwind-tables -fno-unwind-tables), for test_guarded.c's
 * stack_no_unwind_tables: a stack captured below it ends at its frame (stack.h S4). */
void notables_call(void (*f)(void));
volatile int notables_sink;
__attribute__((noinline)) void notables_call(void (*f)(void)) {
  f();
  notables_sink = 0; /* keeps the call from becoming a jump: its frame stays on the stack */
}
