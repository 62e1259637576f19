/* dn.c: being written */
