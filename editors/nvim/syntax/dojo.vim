" Syntax of PerfDojo kernels (`.dojo`, FORMAT.md version 1.1).
if exists("b:current_syntax")
  finish
endif

syn keyword dojoKernel kernel
syn keyword dojoType f32 f64 i32 i64
syn keyword dojoLocation heap stack shared
syn keyword dojoFunction exp log sqrt abs tanh erf
" max and min are functions before "(" and reductions before "=".
syn match dojoFunction "\<\(max\|min\)\ze\s*("
syn keyword dojoConstant inf
syn match dojoNumber "\<\d\+\(\.\d*\)\=\([eE][-+]\=\d\+\)\=\>"
" A scope token with its mapping suffix: 512:v, 64:p, 32:b ...
syn match dojoScope "\<\d\+:[upvgbw]\>"
syn match dojoStored "\<\d\+:\d\+\>"
syn match dojoContinue "|"
syn match dojoScopeRef "{\d\+}"
syn match dojoAssign "\(max\|min\)\==\|[+*]="
syn match dojoArrow "->"
syn match dojoComment "#.*$" contains=@Spell

hi def link dojoKernel Keyword
hi def link dojoType Type
hi def link dojoLocation StorageClass
hi def link dojoFunction Function
hi def link dojoConstant Constant
hi def link dojoNumber Number
hi def link dojoScope Special
hi def link dojoStored Number
hi def link dojoContinue Delimiter
hi def link dojoScopeRef Identifier
hi def link dojoAssign Operator
hi def link dojoArrow Operator
hi def link dojoComment Comment

let b:current_syntax = "dojo"
