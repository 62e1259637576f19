/* ops.c: being written */
