/* ldif.c: being written */
