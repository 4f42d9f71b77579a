" PerfDojo kernels: *.dojo files have the filetype `dojo`.
autocmd BufRead,BufNewFile *.dojo setfiletype dojo
