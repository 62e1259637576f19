/* check.c: being written */
